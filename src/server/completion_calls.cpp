// The completion endpoints' requests as they come: OpenAI's completions and
// chat, llama-server's native /completion and /infill, each with its fields
// taken into the one completion call (server/completion.cpp runs it).
#include <httplib.h>

#include <algorithm>
#include <optional>

#include "server/answer.h"
#include "server/json_fields.h"
#include "server/logprobs.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

json Server::openai_body(const httplib::Request& req) const { return with_default_model(parse_object(req.body)); }

namespace {

// As llama-server does: a server of one model and no folder where more may
// appear (a reloaded --config may add some; the count is read each time)
// answers whatever name a client sends, so
// clients that send their own default ("gpt-4o-mini") work unchanged. A
// server of several, or one that may find more, tells a name it does not
// have apart (404).
bool stands_for_any_name(const json& name, const Registry& registry, bool may_find_more) {
  if (!name.is_string() || may_find_more || registry.names().size() != 1) return false;
  try {
    (void)registry.settings(name.get<std::string>());
    return false;
  } catch (const std::exception&) {
    return true;
  }
}

}  // namespace

json Server::with_default_model(json body) const {
  const auto it = body.find("model");
  const bool named = it != body.end() && !it->is_null();
  if (named && !stands_for_any_name(*it, registry_, static_cast<bool>(options_.rediscover))) return body;
  // A server of one model (or with --default-model) needs no name; one of
  // several does, and the parse says so.
  if (!options_.default_model.empty()) {
    body["model"] = options_.default_model;
  } else if (const std::vector<std::string> names = registry_.names(); names.size() == 1) {
    body["model"] = names.front();
  }
  return body;
}

void Server::openai_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const json body = openai_body(req);
    complete(req, res,
             {named_model(body), [&body, chat](const json& defaults) { return parse_completion_request(body, chat, defaults); },
              openai_answer},
             std::move(run));
  });
}

void Server::completions(const httplib::Request& req, httplib::Response& res) { openai_completion(req, res, false); }

namespace {

// llama-server's n_predict, as max_tokens; true when the reply has no bound
// of its own: n_predict -1, or neither field (llama-server's default
// generates until the end token or the context's end).
bool take_n_predict(json& body) {
  bool unbounded = !has_field(body, "max_tokens");
  if (has_field(body, "n_predict")) {
    const int64_t n = get_field<int64_t>(body, "n_predict", "an integer");
    if (n > (1 << 24)) bad_field("n_predict", "'n_predict' must be at most 16777216 (-1: no limit)");
    unbounded = n < 0;
    if (n >= 0 && !has_field(body, "max_tokens")) body["max_tokens"] = n;
  }
  return unbounded;
}

// llama-server's n_probs: the top tokens of each generated one, with their
// log-probabilities (0: none), as the completions' logprobs count.
void take_n_probs(json& body) {
  if (!has_field(body, "n_probs")) return;
  const std::string range = "an integer from 0 to " + std::to_string(kMaxTopLogprobs);
  const int64_t n = get_field<int64_t>(body, "n_probs", range.c_str());
  if (n < 0 || n > kMaxTopLogprobs) bad_field("n_probs", "'n_probs' must be " + range);
  if (n > 0 && !has_field(body, "logprobs")) body["logprobs"] = n;
}

}  // namespace

// llama-server's native completion (/completion, /infill): its own fields
// taken into the body, and its reply's shape. `body` outlives the call.
Server::CompletionCall Server::native_call(json& body, std::optional<InfillInput> infill) {
  const bool unbounded = take_n_predict(body);
  NativeOptions o;
  o.return_tokens = has_field(body, "return_tokens") && get_field<bool>(body, "return_tokens", "true or false");
  if (has_field(body, "response_fields")) {
    const json& f = body["response_fields"];
    if (!f.is_array() || !std::all_of(f.begin(), f.end(), [](const json& e) { return e.is_string(); })) {
      bad_field("response_fields", "'response_fields' must be an array of field paths (\"generation_settings/n_predict\")");
    }
    o.response_fields = f.get<std::vector<std::string>>();
  }
  take_n_probs(body);
  return {named_model(body),
          [&body, unbounded, infill = std::move(infill)](const json& defaults) {
            CompletionRequest r = parse_completion_request(body, false, defaults);
            if (unbounded && !defaults.contains("max_tokens")) r.generate.max_tokens = -1;
            r.native_probs = true;
            r.infill = infill;
            return r;
          },
          [o](const CompletionRequest& r) { return native_answer(r, o); }};
}

void Server::native_completion(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    json body = openai_body(req);
    complete(req, res, native_call(body, std::nullopt), std::move(run));
  });
}

// llama-server's /infill: its /completion with the code around the cursor
// (server/infill.h); the prompt, the middle's start, may be left out.
void Server::infill(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    json body = openai_body(req);
    InfillInput input = parse_infill(body);
    if (!has_field(body, "prompt")) body["prompt"] = "";
    if (!body["prompt"].is_string()) bad_field("prompt", "'prompt' must be a string");
    complete(req, res, native_call(body, std::move(input)), std::move(run));
  });
}

void Server::chat_completions(const httplib::Request& req, httplib::Response& res) { openai_completion(req, res, true); }

}  // namespace reclaim::server
