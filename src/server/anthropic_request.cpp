// Anthropic's Messages body, read into the chat request's JSON. Content
// blocks become what the chat templates read: text joined into a message's
// content, tool_use blocks an assistant's tool calls, tool_result blocks
// tool messages (before the user's own text, which follows them), thinking
// the assistant's reasoning_content.
#include <string>

#include "server/anthropic.h"
#include "server/image_parts.h"
#include "server/json_fields.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// A block's `type`, or a 400.
std::string block_type(const json& b, const std::string& here) {
  if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) bad_field(here, "'" + here + "' must be an object with a 'type'");
  return b["type"].get<std::string>();
}

std::string text_of(const json& b, const std::string& here) { return string_at(b, "text", here).get<std::string>(); }

// A string, or text blocks joined (system prompts, tool results).
std::string plain_text(const json& v, const std::string& here) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_field(here, "'" + here + "' must be a string or an array of text blocks");
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) {
    const std::string there = indexed(here, k);
    const std::string type = block_type(v[k], there);
    if (type != "text") bad_field(there, "'" + there + "' is a '" + type + "' block: this server reads text only", "unsupported_content");
    if (!out.empty()) out += "\n";
    out += text_of(v[k], there);
  }
  return out;
}

// One message's blocks, as the chat messages they make.
void add_message(const json& m, size_t i, json& out) {
  const std::string here = indexed("messages", i);
  if (!m.is_object()) bad_field(here, "'" + here + "' must be an object");
  const std::string role = string_or(m, "role", "", here);
  if (role != "user" && role != "assistant") bad_field(here + ".role", "'" + here + ".role' must be \"user\" or \"assistant\"");
  if (!m.contains("content")) bad_field(here + ".content", "'" + here + ".content' is required");
  const json& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad_field(here + ".content", "'" + here + ".content' must be a string or an array of content blocks");
  std::string text, thinking;
  json calls = json::array(), results = json::array();
  json parts = json::array();  // a user's text and images in order, once it has an image
  const auto flush_text = [&] {
    if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
    text.clear();
  };
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string there = indexed(here + ".content", k);
    const json& b = content[k];
    const std::string type = block_type(b, there);
    if (type == "text") {
      text += text_of(b, there);
    } else if (type == "thinking" && role == "assistant") {
      thinking += string_at(b, "thinking", there).get<std::string>();
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Another server's sealed reasoning: nothing a template can read.
    } else if (type == "tool_use" && role == "assistant") {
      const json& id = string_at(b, "id", there);
      const json& name = string_at(b, "name", there);
      const json input = b.contains("input") ? b["input"] : json::object();
      if (!input.is_object()) bad_field(there + ".input", "'" + there + ".input' must be an object");
      calls.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      const json& use_id = string_at(b, "tool_use_id", there);
      const std::string result = b.contains("content") ? plain_text(b["content"], there + ".content") : std::string();
      const bool error = b.contains("is_error") && b["is_error"].is_boolean() && b["is_error"].get<bool>();
      results.push_back({{"role", "tool"}, {"tool_call_id", use_id}, {"content", error ? "Error: " + result : result}});
    } else if (type == "image" && role == "user") {
      const std::string at = there + ".source";
      const json& src = b.contains("source") ? b["source"] : json();
      const std::string kind = src.is_object() && src.contains("type") && src["type"].is_string() ? src["type"].get<std::string>() : "";
      std::string url;
      if (kind == "base64") {
        const std::string data = string_at(src, "data", at).get<std::string>();
        (void)image_from_base64(data, at + ".data");  // a mistake named as the client sent it
        const bool typed = src.contains("media_type") && src["media_type"].is_string();
        url = "data:" + (typed ? src["media_type"].get<std::string>() : std::string("image")) + ";base64," + data;
      } else if (kind == "url") {
        url = string_at(src, "url", at).get<std::string>();
        (void)image_from_url(url, at + ".url");
      } else {
        bad_field(at + ".type", "'" + at + ".type' must be \"base64\" or \"url\"");
      }
      flush_text();
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
    } else if (type == "image" || type == "document" || type == "search_result") {
      bad_field(there, "'" + there + "' is a '" + type + "' block: this server reads text only", "unsupported_content");
    } else {
      bad_field(there, "'" + there + "' is a '" + type + "' block, which a " + role + " message cannot hold");
    }
  }
  for (json& r : results) out.push_back(std::move(r));
  if (role == "user") {
    if (!parts.empty()) {
      flush_text();
      out.push_back({{"role", "user"}, {"content", parts}});
    } else if (!text.empty() || results.empty()) {
      out.push_back({{"role", "user"}, {"content", text}});
    }
    return;
  }
  json a = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? json(text) : json(nullptr)}};
  if (!calls.empty()) a["tool_calls"] = calls;
  if (!thinking.empty()) a["reasoning_content"] = thinking;
  out.push_back(std::move(a));
}

json function_tools(const json& tools) {
  if (!tools.is_array()) bad_field("tools", "'tools' must be an array");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string here = indexed("tools", i);
    const json& t = tools[i];
    if (!t.is_object()) bad_field(here, "'" + here + "' must be an object");
    const std::string type = string_or(t, "type", "custom", here);
    if (type != "custom") {
      bad_field(here + ".type", "'" + here + ".type' is '" + type + "': this server runs no tools of its own, only those the client defines",
                "unsupported_tool");
    }
    json f = {{"name", string_at(t, "name", here)}};
    if (has_field(t, "description")) f["description"] = t["description"];
    if (has_field(t, "input_schema")) f["parameters"] = t["input_schema"];
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

// Anthropic's auto, any, tool and none; and whether calls may come several
// at once.
void tool_choice(const json& c, json& o) {
  if (!c.is_object() || !c.contains("type") || !c["type"].is_string()) {
    bad_field("tool_choice", "'tool_choice' must be an object with a 'type': auto, any, tool or none");
  }
  const std::string type = c["type"].get<std::string>();
  if (type == "auto") {
    o["tool_choice"] = "auto";
  } else if (type == "any") {
    o["tool_choice"] = "required";
  } else if (type == "none") {
    o["tool_choice"] = "none";
  } else if (type == "tool") {
    o["tool_choice"] = {{"type", "function"}, {"function", {{"name", string_at(c, "name", "tool_choice")}}}};
  } else {
    bad_field("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
  }
  if (has_field(c, "disable_parallel_tool_use")) {
    o["parallel_tool_calls"] = !get_field<bool>(c, "disable_parallel_tool_use", "true or false");
  }
}

}  // namespace

json anthropic_chat_body(const json& a, bool count_only) {
  json o = json::object();
  if (a.contains("model")) o["model"] = a["model"];
  if (!count_only) {
    if (!has_field(a, "max_tokens")) bad_field("max_tokens", "'max_tokens' is required");
    o["max_tokens"] = a["max_tokens"];
  }
  json messages = json::array();
  if (has_field(a, "system")) messages.push_back({{"role", "system"}, {"content", plain_text(a["system"], "system")}});
  if (!a.contains("messages") || !a["messages"].is_array() || a["messages"].empty()) {
    bad_field("messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < a["messages"].size(); ++i) add_message(a["messages"][i], i, messages);
  o["messages"] = messages;
  if (has_field(a, "tools")) o["tools"] = function_tools(a["tools"]);
  if (has_field(a, "tool_choice")) tool_choice(a["tool_choice"], o);
  if (has_field(a, "stop_sequences")) {
    const json& s = a["stop_sequences"];
    if (!s.is_array()) bad_field("stop_sequences", "'stop_sequences' must be an array of strings");
    if (s.size() > 4) bad_field("stop_sequences", "'stop_sequences' has " + std::to_string(s.size()) + " strings; at most 4 are taken");
    std::vector<std::string> stops;
    for (const json& x : s) {
      if (x.is_string()) stops.push_back(x.get<std::string>());  // other types: the chat request's error
    }
    check_stops(stops, "stop_sequences");  // under the name the client sent
    o["stop"] = s;
  }
  for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
    if (a.contains(key)) o[key] = a[key];
  }
  return o;
}

}  // namespace reclaim::server
