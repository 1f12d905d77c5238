// What a chat request would put in front of its model, nothing decoded:
// llama-server's /apply-template, and the input token counts that clients
// read to trim a conversation before they send it. Each renders as the
// request itself would render (server/completion.cpp's render_only), with
// the same bounds, so a count is the prompt's, not an estimate.
#include <httplib.h>

#include "server/openai.h"
#include "server/responses.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

void Server::apply_template(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    std::string prompt;
    (void)render_only(run, openai_body(req), prompt);
    run->succeed();
    res.set_content(json{{"prompt", prompt}}.dump(), "application/json");
  });
}

// POST /v1/chat/completions/input_tokens: a chat completion's body.
void Server::chat_input_tokens(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    std::string prompt;
    const size_t n = render_only(run, openai_body(req), prompt).size();
    run->succeed();
    res.set_content(json{{"input_tokens", n}}.dump(), "application/json");
  });
}

// POST /v1/responses/input_tokens: a response's body, answered in the shape
// OpenAI's input token count has.
void Server::responses_input_tokens(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    std::string prompt;
    const size_t n = render_only(run, with_default_model(responses_chat_body(parse_object(req.body))), prompt).size();
    run->succeed();
    res.set_content(json{{"object", "response.input_tokens"}, {"input_tokens", n}}.dump(), "application/json");
  });
}

}  // namespace reclaim::server
