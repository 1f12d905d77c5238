// The Responses API's body, read into the chat request's JSON. Input items
// become chat messages: a message's text parts joined, function_call items
// an assistant's tool calls (with its text, when they follow it),
// function_call_output items tool messages, reasoning items the next
// assistant message's reasoning_content.
#include <algorithm>
#include <string>

#include "server/image_parts.h"
#include "server/json_fields.h"
#include "server/responses.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// A message's content: a string, or text parts joined.
std::string content_text(const json& content, const std::string& here) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_field(here, "'" + here + "' must be a string or an array of content parts");
  std::string out;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string there = indexed(here, k);
    const json& part = content[k];
    const std::string type = string_or(part, "type", "", there);
    if (type == "input_text" || type == "output_text" || type == "text") {
      out += string_at(part, "text", there).get<std::string>();
    } else if (type == "refusal") {
      out += string_at(part, "refusal", there).get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      bad_field(there, "'" + there + "' is an '" + type + "' part: this server reads text only", "unsupported_content");
    } else {
      bad_field(there + ".type", "'" + there + ".type' must be input_text, output_text or refusal");
    }
  }
  return out;
}

// A user's or system's content: as content_text, or, where it holds
// input_image parts, chat parts in order, each image an image_url part.
json message_content(const json& content, const std::string& here) {
  const bool images = content.is_array() && std::any_of(content.begin(), content.end(), [](const json& p) {
    return p.is_object() && p.contains("type") && p["type"] == "input_image";
  });
  if (!images) return content_text(content, here);
  json parts = json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string there = indexed(here, k);
    const json& part = content[k];
    if (!part.is_object() || !part.contains("type") || part["type"] != "input_image") {
      parts.push_back({{"type", "text"}, {"text", content_text(json::array({part}), here)}});
      continue;
    }
    if (has_field(part, "file_id")) {
      bad_field(there + ".file_id", "'" + there + ".file_id': this server keeps no files; send the image as a data: URL",
                "unsupported_content");
    }
    const std::string url = string_at(part, "image_url", there).get<std::string>();
    (void)image_from_url(url, there + ".image_url");  // a mistake named as the client sent it
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
  }
  return parts;
}

class Messages {
 public:
  void instructions(const std::string& text) { out_.push_back({{"role", "system"}, {"content", text}}); }

  void add(const json& item, size_t i) {
    const std::string here = indexed("input", i);
    if (!item.is_object()) bad_field(here, "'" + here + "' must be an object");
    const std::string type = string_or(item, "type", item.contains("role") ? "message" : "", here);
    if (type == "message") {
      message(item, here);
    } else if (type == "function_call") {
      json call = {{"id", string_at(item, "call_id", here)},
                   {"type", "function"},
                   {"function", {{"name", string_at(item, "name", here)}, {"arguments", string_at(item, "arguments", here)}}}};
      assistant()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const json& output = item.contains("output") ? item["output"] : json();
      if (!output.is_string() && !output.is_array()) bad_field(here + ".output", "'" + here + ".output' must be a string or content parts");
      out_.push_back({{"role", "tool"}, {"tool_call_id", string_at(item, "call_id", here)}, {"content", content_text(output, here + ".output")}});
    } else if (type == "reasoning") {
      for (const char* key : {"content", "summary"}) {
        if (!item.contains(key) || !item[key].is_array()) continue;
        for (const json& part : item[key]) {
          if (part.is_object() && part.contains("text") && part["text"].is_string()) reasoning_ += part["text"].get<std::string>();
        }
      }
    } else {
      bad_field(here + ".type", "'" + here + ".type' must be message, function_call, function_call_output or reasoning");
    }
  }

  json take() {
    if (out_.empty()) bad_field("input", "'input' has no message");
    return std::move(out_);
  }

 private:
  void message(const json& item, const std::string& here) {
    const std::string role = string_or(item, "role", "", here);
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      bad_field(here + ".role", "'" + here + ".role' must be user, system, developer or assistant");
    }
    if (!item.contains("content")) bad_field(here + ".content", "'" + here + ".content' is required");
    if (role != "assistant") {
      out_.push_back({{"role", role}, {"content", message_content(item["content"], here + ".content")}});
      return;
    }
    const std::string text = content_text(item["content"], here + ".content");
    // A new assistant turn, unless it goes on one that only called tools.
    json& a = assistant(true);
    a["content"] = a["content"].is_string() ? json(a["content"].get<std::string>() + text) : json(text);
  }

  // The assistant message that calls and text go in: the last one, while
  // nothing came after it (`fresh`: a new one unless the last has no text).
  json& assistant(bool fresh = false) {
    const bool last_is_assistant = !out_.empty() && out_.back()["role"] == "assistant";
    if (!last_is_assistant || (fresh && out_.back()["content"].is_string() && !out_.back()["content"].get<std::string>().empty())) {
      out_.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}});
    }
    json& a = out_.back();
    if (!a.contains("tool_calls")) a["tool_calls"] = json::array();
    if (!reasoning_.empty()) {
      a["reasoning_content"] = reasoning_;
      reasoning_.clear();
    }
    return a;
  }

  json out_ = json::array();
  std::string reasoning_;
};

json function_tools(const json& tools) {
  if (!tools.is_array()) bad_field("tools", "'tools' must be an array");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string here = indexed("tools", i);
    const json& t = tools[i];
    const std::string type = string_or(t, "type", "", here);
    if (type != "function") {
      bad_field(here + ".type", "'" + here + ".type' is '" + type + "': this server runs no tools of its own, only functions the client runs",
                "unsupported_tool");
    }
    json f = {{"name", string_at(t, "name", here)}};
    if (has_field(t, "description")) f["description"] = t["description"];
    if (has_field(t, "parameters")) f["parameters"] = t["parameters"];
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

json tool_choice(const json& c) {
  if (c.is_string()) return c;  // auto, none, required: the chat request checks which
  if (c.is_object() && string_or(c, "type", "", "tool_choice") == "function" && c.contains("name") && c["name"].is_string()) {
    return {{"type", "function"}, {"function", {{"name", c["name"]}}}};
  }
  bad_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
}

// text.format: text, json_object, or json_schema with its name, schema and
// strict, as the chat request's response_format.
void text_format(const json& text, json& o) {
  if (!text.is_object()) bad_field("text", "'text' must be an object");
  if (!has_field(text, "format")) return;
  const json& f = text["format"];
  const std::string type = string_or(f, "type", "", "text.format");
  if (type == "text") return;
  if (type == "json_object") {
    o["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    json js = {{"name", string_or(f, "name", "reply", "text.format")}, {"schema", f.contains("schema") ? f["schema"] : json::object()}};
    if (f.contains("strict")) js["strict"] = f["strict"];
    o["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
  } else {
    bad_field("text.format.type", "'text.format.type' must be text, json_object or json_schema");
  }
}

}  // namespace

json responses_chat_body(const json& r) {
  if (has_field(r, "previous_response_id")) {
    bad_field("previous_response_id",
              "'previous_response_id' cannot be used: this server keeps no responses (send the conversation as 'input')",
              "unsupported_previous_response");
  }
  json o = json::object();
  if (r.contains("model")) o["model"] = r["model"];
  Messages messages;
  if (has_field(r, "instructions")) {
    if (!r["instructions"].is_string()) bad_field("instructions", "'instructions' must be a string");
    messages.instructions(r["instructions"].get<std::string>());
  }
  if (!has_field(r, "input")) bad_field("input", "'input' is required");
  const json& input = r["input"];
  if (input.is_string()) {
    messages.add({{"role", "user"}, {"content", input}}, 0);
  } else if (input.is_array() && !input.empty()) {
    for (size_t i = 0; i < input.size(); ++i) messages.add(input[i], i);
  } else {
    bad_field("input", "'input' must be a string or a non-empty array of items");
  }
  json chat = messages.take();
  // An assistant message that called no tool has no tool_calls.
  for (json& m : chat) {
    if (m.contains("tool_calls") && m["tool_calls"].empty()) m.erase("tool_calls");
  }
  o["messages"] = std::move(chat);
  if (has_field(r, "tools")) o["tools"] = function_tools(r["tools"]);
  if (has_field(r, "tool_choice")) o["tool_choice"] = tool_choice(r["tool_choice"]);
  if (has_field(r, "text")) text_format(r["text"], o);
  if (r.contains("max_output_tokens")) o["max_tokens"] = r["max_output_tokens"];
  // llama-server's own fields of a response's stream pass as they are.
  for (const char* key : {"temperature", "top_p", "stream", "parallel_tool_calls", "return_progress", "timings_per_token"}) {
    if (r.contains(key)) o[key] = r[key];
  }
  return o;
}

}  // namespace reclaim::server
