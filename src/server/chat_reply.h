// A chat reply, as its template's parser read it, in OpenAI's shapes: the
// message (content, reasoning_content, tool_calls), a stream's deltas, and
// the finish reason ("tool_calls" when the reply called tools).
#pragma once

#include <nlohmann/json.hpp>

#include "engine/chat.h"
#include "engine/generate.h"

namespace reclaim::server {

nlohmann::json chat_message_json(const ChatReply& reply);
// A stream's first chunk's delta, the assistant's role alone (content null,
// as llama-server sends it; OpenAI's clients take null or "").
nlohmann::json role_delta_json();
// A stream chunk's delta.
nlohmann::json delta_json(const ChatDelta& d);
const char* chat_finish_reason(FinishReason f, const ChatReply& reply);

}  // namespace reclaim::server
