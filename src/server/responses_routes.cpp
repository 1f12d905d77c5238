// OpenAI's Responses endpoint: the body is read into the chat request
// (server/responses_request.cpp) and run as every chat is
// (server/completion.cpp); the reply is a response or its events.
#include <httplib.h>

#include "server/json_fields.h"
#include "server/openai.h"
#include "server/responses.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

void Server::responses(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const json body = with_default_model(responses_chat_body(parse_object(req.body)));
    complete(req, res, {named_model(body), [&body](const json& defaults) { return parse_completion_request(body, true, defaults); }, responses_answer},
             std::move(run));
  });
}

}  // namespace reclaim::server
