// A chat reply, as its template's parser read it, in OpenAI's shapes: the
// message (content, reasoning_content, tool_calls), a stream's deltas, and
// the finish reason ("tool_calls" when the reply called tools).
#pragma once

#include <nlohmann/json.hpp>

#include "engine/chat.h"
#include "engine/generate.h"

namespace reclaim::server {

nlohmann::json chat_message_json(const ChatReply& reply);
// A stream chunk's delta; `first` opens it with the assistant's role.
nlohmann::json delta_json(const ChatDelta& d, bool first);
const char* chat_finish_reason(FinishReason f, const ChatReply& reply);

}  // namespace reclaim::server
