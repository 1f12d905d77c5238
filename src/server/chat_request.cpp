#include "server/chat_request.h"

#include <set>

#include "server/image_parts.h"
#include "server/json_fields.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

const std::set<std::string>& roles() {
  static const std::set<std::string> r = {"system", "developer", "user", "assistant", "tool"};
  return r;
}

// Text parts pass; an image part's file goes to `images` and its place in
// the text is marked (server/image_parts.h); an audio or file part is named.
void check_parts(json& content, const std::string& at, std::vector<std::string>& images) {
  for (size_t k = 0; k < content.size(); ++k) {
    json& part = content[k];
    const std::string here = at + "[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      bad_field(here, "'" + here + "' must be an object with a 'type'");
    }
    const std::string type = part["type"].get<std::string>();
    if (type == "image_url") {
      // {"url": ...} as OpenAI sends it; a bare string as some clients do.
      const json* url = part.contains("image_url") ? &part["image_url"] : nullptr;
      if (url && url->is_object()) url = url->contains("url") ? &(*url)["url"] : nullptr;
      if (!url || !url->is_string()) bad_field(here + ".image_url.url", "'" + here + ".image_url.url' must be a string");
      images.push_back(image_from_url(url->get<std::string>(), here + ".image_url.url"));
      part = json{{"type", "text"}, {"text", image_place()}};
      continue;
    }
    if (type != "text") {
      bad_field(here, "'" + here + "' is a '" + type + "' part: this server reads text and images", "unsupported_content");
    }
    if (!part.contains("text") || !part["text"].is_string()) bad_field(here + ".text", "'" + here + ".text' must be a string");
  }
}

void check_tool_calls(const json& calls, const std::string& at) {
  if (!calls.is_array()) bad_field(at, "'" + at + "' must be an array");
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    const std::string here = at + "[" + std::to_string(k) + "]";
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      bad_field(here, "'" + here + "' must be an object with a 'function'");
    }
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) bad_field(here + ".function.name", "'" + here + ".function.name' must be a string");
    if (f.contains("arguments") && !f["arguments"].is_string()) {
      bad_field(here + ".function.arguments", "'" + here + ".function.arguments' must be a string of JSON");
    }
    if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null()) bad_field(here + ".id", "'" + here + ".id' must be a string");
  }
}

// The messages as the template library reads them: OpenAI's "developer"
// role is the system's (templates know only "system").
json checked_messages(const json& j, std::vector<std::string>& images) {
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty()) {
    bad_field("messages", "'messages' must be a non-empty array");
  }
  json out = j["messages"];
  for (size_t i = 0; i < out.size(); ++i) {
    json& m = out[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_field(at, "'" + at + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string() || !roles().count(m["role"].get<std::string>())) {
      bad_field(at + ".role", "'" + at + ".role' must be one of system, developer, user, assistant, tool");
    }
    const std::string role = m["role"].get<std::string>();
    if (role == "developer") m["role"] = "system";
    const bool calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (calls) {
      if (role != "assistant") bad_field(at + ".tool_calls", "'" + at + ".tool_calls' belongs to an assistant message");
      check_tool_calls(m["tool_calls"], at + ".tool_calls");
    }
    if (!m.contains("content") || m["content"].is_null()) {
      // OpenAI: an assistant's content may be null when it called tools (or
      // said nothing).
      if (role != "assistant") bad_field(at + ".content", "'" + at + ".content' is required for a " + role + " message");
      m["content"] = calls ? json(nullptr) : json("");
    } else if (m["content"].is_array()) {
      check_parts(m["content"], at + ".content", images);
    } else if (!m["content"].is_string()) {
      bad_field(at + ".content", "'" + at + ".content' must be a string, an array of text parts, or null");
    }
    if (role == "tool" && m.contains("tool_call_id") && !m["tool_call_id"].is_string()) {
      bad_field(at + ".tool_call_id", "'" + at + ".tool_call_id' must be a string");
    }
    if (m.contains("name") && !m["name"].is_string()) bad_field(at + ".name", "'" + at + ".name' must be a string");
  }
  return out;
}

// OpenAI takes at most 128 tools a request. Each tool costs a chat template
// a render of its schema, several times over while llama.cpp reads the
// template's format: Qwen 2.5's made 45 KiB of values a tool, and 1,500 went
// over its bound (HostileText.HostileSchemasAndThousandsOfToolsAreAnsweredAndTheServerGoesOn
// prints what each count gets).
constexpr size_t kMaxTools = 1024;

std::vector<ChatTool> checked_tools(const json& tools) {
  if (!tools.is_array()) bad_field("tools", "'tools' must be an array");
  if (tools.size() > kMaxTools) {
    bad_field("tools", "'tools' has " + std::to_string(tools.size()) + " tools, more than the limit of " + std::to_string(kMaxTools));
  }
  std::vector<ChatTool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || string_or(t, "type", "", at) != "function" || !t.contains("function") || !t["function"].is_object()) {
      bad_field(at, "'" + at + "' must be {\"type\": \"function\", \"function\": {...}}");
    }
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
      bad_field(at + ".function.name", "'" + at + ".function.name' must be a non-empty string");
    }
    ChatTool tool;
    tool.name = f["name"].get<std::string>();
    if (has_field(f, "description")) {
      if (!f["description"].is_string()) bad_field(at + ".function.description", "'" + at + ".function.description' must be a string");
      tool.description = f["description"].get<std::string>();
    }
    json params = json{{"type", "object"}, {"properties", json::object()}};
    if (has_field(f, "parameters")) {
      if (!f["parameters"].is_object()) bad_field(at + ".function.parameters", "'" + at + ".function.parameters' must be a JSON schema object");
      params = f["parameters"];
    }
    tool.parameters = params.dump();
    out.push_back(std::move(tool));
  }
  return out;
}

}  // namespace

void parse_chat_fields(const json& j, CompletionRequest& r) {
  ChatRequest& c = r.chat_input;
  c.messages = checked_messages(j, r.generate.images).dump();
  check_image_count(r.generate.images.size(), "messages");
  if (has_field(j, "tools")) c.tools = checked_tools(j["tools"]);
  if (has_field(j, "tool_choice")) {
    const json& tc = j["tool_choice"];
    if (tc.is_string()) {
      const std::string s = tc.get<std::string>();
      if (s == "auto") {
        c.tool_choice = ToolChoice::automatic;
      } else if (s == "none") {
        c.tool_choice = ToolChoice::none;
      } else if (s == "required") {
        c.tool_choice = ToolChoice::required;
      } else {
        bad_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a function");
      }
    } else if (tc.is_object() && string_or(tc, "type", "", "tool_choice") == "function" && tc.contains("function") &&
               tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string()) {
      // One function by name: the only tool offered, and a call required.
      const std::string name = tc["function"]["name"].get<std::string>();
      std::vector<ChatTool> only;
      for (const ChatTool& t : c.tools) {
        if (t.name == name) only.push_back(t);
      }
      if (only.empty()) bad_field("tool_choice", "'tool_choice' names function '" + name + "', which is not in 'tools'");
      c.tools = std::move(only);
      c.tool_choice = ToolChoice::required;
    } else {
      bad_field("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (c.tool_choice == ToolChoice::required && c.tools.empty()) {
      bad_field("tool_choice", "'tool_choice' requires a tool call, and 'tools' is empty");
    }
  }
  if (has_field(j, "parallel_tool_calls")) c.parallel_tool_calls = get_field<bool>(j, "parallel_tool_calls", "true or false");
  // llama-server's switch of a template's thinking for one request (a model's
  // defaults may set it for all). Only enable_thinking is read: the other
  // keys a template might take are not passed to it.
  if (has_field(j, "chat_template_kwargs")) {
    const json& kw = j["chat_template_kwargs"];
    if (!kw.is_object()) bad_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (has_field(kw, "enable_thinking")) {
      if (!kw["enable_thinking"].is_boolean()) {
        bad_field("chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be true or false");
      }
      c.think = kw["enable_thinking"].get<bool>();
    }
  }
  // llama-server's: a new turn or the rest of the last assistant message.
  if (has_field(j, "add_generation_prompt")) {
    c.add_generation_prompt = get_field<bool>(j, "add_generation_prompt", "true or false");
  }
  if (has_field(j, "continue_final_message")) {
    const json& v = j["continue_final_message"];
    if (v.is_boolean()) {
      c.continue_final = v.get<bool>() ? Continuation::automatic : Continuation::none;
    } else if (v == "content") {
      c.continue_final = Continuation::content;
    } else if (v == "reasoning_content") {
      c.continue_final = Continuation::reasoning;
    } else {
      bad_field("continue_final_message", "'continue_final_message' must be true, false, \"content\" or \"reasoning_content\"");
    }
  }
}

void parse_output_format(const json& j, CompletionRequest& r) {
  if (has_field(j, "response_format")) {
    const json& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
      bad_field("response_format", "'response_format' must be an object with a 'type'");
    }
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      // llama-server's extension: a json_object may carry its own schema.
      if (has_field(rf, "schema") && !rf["schema"].is_object()) {
        bad_field("response_format.schema", "'response_format.schema' must be a JSON schema object");
      }
      r.json_schema = has_field(rf, "schema") ? rf["schema"].dump() : json{{"type", "object"}}.dump();
    } else if (type == "json_schema") {
      const json& js = rf.contains("json_schema") ? rf["json_schema"] : json();
      if (!js.is_object()) bad_field("response_format.json_schema", "'response_format.json_schema' must be an object");
      if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean()) {
        bad_field("response_format.json_schema.strict", "'response_format.json_schema.strict' must be true or false");
      }
      // Not strict is also enforced: the grammar is all there is to offer.
      const json schema = js.contains("schema") && !js["schema"].is_null() ? js["schema"] : json::object();
      if (!schema.is_object()) bad_field("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON schema object");
      r.json_schema = schema.dump();
    } else if (type != "text") {
      bad_field("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  if (has_field(j, "json_schema")) {
    if (!j["json_schema"].is_object()) bad_field("json_schema", "'json_schema' must be a JSON schema object");
    r.json_schema = j["json_schema"].dump();
  }
  if (!r.json_schema.empty()) {
    // Checked before any model is held, as the grammar it makes: a chat
    // template's own grammar takes the schema in again (engine/chat.h), a
    // completion's is this one.
    std::string gbnf;
    try {
      gbnf = json_schema_grammar(r.json_schema);
    } catch (const ChatError& e) {
      bad_field(has_field(j, "response_format") ? "response_format" : "json_schema", e.what());
    }
    if (!r.chat) r.generate.grammar.gbnf = std::move(gbnf);
  }
  if (has_field(j, "grammar")) r.grammar = get_field<std::string>(j, "grammar", "a GBNF grammar as a string");
  if (!r.grammar.empty() && !r.json_schema.empty()) bad_field("grammar", "'grammar' and a JSON schema cannot both constrain one reply");
  if (!r.grammar.empty() && !r.chat_input.tools.empty() && r.chat_input.tool_choice != ToolChoice::none) {
    bad_field("grammar", "'grammar' cannot constrain a reply that may call tools");
  }
}

void add_default_system(ChatRequest& chat, const std::string& system) {
  nlohmann::json messages = nlohmann::json::parse(chat.messages);
  for (const nlohmann::json& m : messages) {
    if (m.is_object() && m.contains("role") && (m["role"] == "system" || m["role"] == "developer")) return;
  }
  messages.insert(messages.begin(), nlohmann::json{{"role", "system"}, {"content", system}});
  chat.messages = messages.dump();
}

}  // namespace reclaim::server
