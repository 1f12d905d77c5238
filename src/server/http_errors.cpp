#include "server/http_errors.h"

#include <httplib.h>

#include "engine/chat.h"
#include "engine/generate.h"
#include "engine/images.h"
#include "engine/owners.h"
#include "runtime/registry.h"
#include "runtime/stores/pull.h"

namespace reclaim::server {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  res.set_content(error_json(e).dump(), "application/json");
}

std::string required_query(const httplib::Request& req, const char* name, const std::string& what) {
  const std::string v = req.has_param(name) ? req.get_param_value(name) : "";
  if (v.empty()) bad_field(name, std::string("'") + name + "' must be " + what);
  return v;
}

ApiError to_api_error(const std::exception& ex) {
  if (auto* a = dynamic_cast<const ApiException*>(&ex)) return a->error();
  const std::string m = ex.what();
  if (dynamic_cast<const BadModelName*>(&ex)) return {400, "invalid_request_error", "invalid_model", m, 0};
  if (dynamic_cast<const UnknownModel*>(&ex)) return {404, "invalid_request_error", "model_not_found", m, 0};
  if (dynamic_cast<const NoRoom*>(&ex)) return {503, "server_error", "insufficient_memory", m, 10};
  // Only under --no-autoload: waiting does not load it, so not a 503 that
  // clients would retry (llama-server's router answers 400 too).
  if (dynamic_cast<const NotLoaded*>(&ex)) return {400, "invalid_request_error", "model_not_loaded", m, 0};
  if (dynamic_cast<const QueueFull*>(&ex)) return {429, "rate_limit_error", "queue_full", m, 1};
  if (dynamic_cast<const QueueTimeout*>(&ex)) return {503, "server_error", "queue_timeout", m, 5};
  // nginx's word for it; nobody reads it.
  if (dynamic_cast<const ClientGone*>(&ex)) return {499, "invalid_request_error", "client_closed_request", m, 0};
  if (auto* c = dynamic_cast<const ContextOverflow*>(&ex)) {
    // OpenAI's code, which its clients read, with llama-server's type and
    // figures, which its clients read.
    return {400, "exceed_context_size_error", "context_length_exceeded", m, 0, "",
            {{"n_prompt_tokens", c->n_prompt()}, {"n_ctx", c->n_ctx()}}};
  }
  if (dynamic_cast<const LoadAborted*>(&ex)) return {503, "server_error", "load_aborted", m, 5};
  if (dynamic_cast<const InvalidModelFile*>(&ex)) return {422, "invalid_request_error", "invalid_model_file", m, 0};
  if (dynamic_cast<const NoTokenizer*>(&ex)) return {400, "invalid_request_error", "model_has_no_tokenizer", m, 0};
  if (auto* c = dynamic_cast<const ChatError*>(&ex)) return {400, "invalid_request_error", "invalid_chat", m, 0, c->param()};
  if (dynamic_cast<const BadPrompt*>(&ex)) return {400, "invalid_request_error", "invalid_prompt", m, 0};
  if (dynamic_cast<const BadImage*>(&ex)) return {400, "invalid_request_error", "invalid_image", m, 0};
  if (dynamic_cast<const GrammarTooCostly*>(&ex)) return {400, "invalid_request_error", "grammar_too_costly", m, 0, "grammar"};
  if (dynamic_cast<const GrammarDeadEnd*>(&ex)) return {400, "invalid_request_error", "grammar_dead_end", m, 0, "grammar"};
  if (auto* p = dynamic_cast<const PullError*>(&ex)) {
    switch (p->kind()) {
      case PullError::Kind::bad_name: return {400, "invalid_request_error", "invalid_model_name", m, 0};
      case PullError::Kind::not_found: return {404, "not_found_error", "model_not_found", m, 0};
      case PullError::Kind::disk: return {507, "server_error", "insufficient_storage", m, 0};
      case PullError::Kind::interrupted: return {499, "server_error", "cancelled", m, 0};
      default: return {502, "server_error", "bad_gateway", m, 0};
    }
  }
  return {500, "server_error", "", m, 0};
}

}  // namespace reclaim::server
