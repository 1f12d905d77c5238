// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens):
// a body is read into the chat request every API runs (its system, its
// content blocks, tool_use and tool_result, thinking, tools and
// tool_choice), and the reply is written in Anthropic's shapes: a message
// object, or its stream of typed events with pings while it waits.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "server/answer.h"

namespace httplib {
struct Response;
}

namespace reclaim::server {

// The Messages body as the chat request's JSON (OpenAI's shape, which
// parse_completion_request reads). Throws ApiException (400) naming the field
// where it is wrong. `count_only`: for count_tokens, which needs no
// max_tokens.
nlohmann::json anthropic_chat_body(const nlohmann::json& body, bool count_only);

std::unique_ptr<Answer> anthropic_answer(const CompletionRequest& req);

// {"type": "error", "error": {"type", "message"}} with the status.
void send_anthropic_error(httplib::Response& res, const ApiError& e);

}  // namespace reclaim::server
