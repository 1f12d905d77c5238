#include "server/chat_reply.h"

#include "server/openai.h"

namespace reclaim::server {

using nlohmann::json;

json chat_message_json(const ChatReply& reply) {
  json m = {{"role", "assistant"}};
  // OpenAI: null content beside tool calls.
  m["content"] = reply.content.empty() && !reply.tool_calls.empty() ? json(nullptr) : json(reply.content);
  if (!reply.reasoning.empty()) m["reasoning_content"] = reply.reasoning;
  if (!reply.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& c : reply.tool_calls) {
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    m["tool_calls"] = calls;
  }
  return m;
}

json role_delta_json() { return {{"role", "assistant"}, {"content", nullptr}}; }

json delta_json(const ChatDelta& d) {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (d.tool_index != std::string::npos) {
    // A call's first delta carries its id, type and name; the rest, pieces
    // of its arguments (OpenAI's stream).
    json call = {{"index", d.tool_index}};
    json function = json::object();
    if (!d.tool.id.empty()) {
      call["id"] = d.tool.id;
      call["type"] = "function";
    }
    if (!d.tool.name.empty()) function["name"] = d.tool.name;
    function["arguments"] = d.tool.arguments;
    call["function"] = function;
    delta["tool_calls"] = json::array({call});
  }
  return delta;
}

const char* chat_finish_reason(FinishReason f, const ChatReply& reply) {
  if (!reply.tool_calls.empty() && (f == FinishReason::eos || f == FinishReason::stop)) return "tool_calls";
  return openai_finish_reason(f);
}

}  // namespace reclaim::server
