// OpenAI's Responses API (POST /v1/responses): the body's input items are
// read into the chat request every API runs (instructions, messages,
// function calls and their outputs, reasoning), and the reply is written as
// a response object, or its stream of typed events.
//
// Stateless: a response is not kept after it is sent, so
// `previous_response_id` is a 400 (send the conversation as `input`) and
// `store` is answered false. Keeping responses would hold memory for a
// client that may never come back, and reclaim gives back what a request
// took when it ends; agents that use this API (Codex, the Agents SDK) send
// the whole conversation each turn with `store: false`.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "server/answer.h"

namespace reclaim::server {

// The Responses body as the chat request's JSON (OpenAI's chat shape, which
// parse_completion_request reads). Throws ApiException (400) naming the
// field where it is wrong.
nlohmann::json responses_chat_body(const nlohmann::json& body);

std::unique_ptr<Answer> responses_answer(const CompletionRequest& req);

}  // namespace reclaim::server
