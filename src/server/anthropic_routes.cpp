// Anthropic's endpoints: the body is read into the chat request
// (server/anthropic_request.cpp) and run as every chat is
// (server/completion.cpp); the reply and the errors are Anthropic's.
#include <httplib.h>

#include "server/anthropic.h"
#include "server/json_fields.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

void Server::anthropic_messages(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const json body = with_default_model(anthropic_chat_body(parse_object(req.body), false));
    complete(req, res,
             {named_model(body), [&body](const json& defaults) { return parse_completion_request(body, true, defaults); },
              anthropic_answer},
             std::move(run));
  });
}

void Server::anthropic_count_tokens(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    std::string prompt;
    const size_t n = render_only(run, with_default_model(anthropic_chat_body(parse_object(req.body), true)), prompt).size();
    run->succeed();
    res.set_content(json{{"input_tokens", n}}.dump(), "application/json");
  });
}

}  // namespace reclaim::server
