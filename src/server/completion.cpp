// POST /v1/completions and /v1/chat/completions: a request from its body to
// its last byte, on each of its paths.
//
// - Not streamed: it waits for its model (the registry's line) on its own
//   thread, then generates; a client that leaves is seen by polling its
//   socket while it waits and between decode steps, and the request is
//   cancelled and its sequence freed.
// - Streamed, model ready: the prompt is checked before the headers, so a bad
//   request is a 4xx; then chunks as text comes.
// - Streamed, model not ready (loading, a swap, a full batch): the headers go
//   at once and the stream waits, with an SSE comment every
//   stream_keepalive, so proxies keep it. What fails after the headers ends
//   the stream with an error event and `data: [DONE]`.
//
// A request cancelled by an unload ends with finish_reason "length" when
// streamed (its reply is cut short; OpenAI's clients accept only stop,
// length, tool_calls, content_filter and function_call), and as a 503 with
// Retry-After when not.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>

#include "core/defer.h"
#include "engine/batcher.h"
#include "engine/chat.h"
#include "engine/generate.h"
#include "engine/generation.h"
#include "engine/grammar_limits.h"
#include "engine/image_prompt.h"
#include "engine/images.h"
#include "engine/model.h"
#include "runtime/request_run.h"
#include "server/answer.h"
#include "server/chat_request.h"
#include "server/connections.h"
#include "server/http_errors.h"
#include "server/json_fields.h"
#include "server/logprobs.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// What a request needs while it runs; shared with the stream's provider so
// that its run (and the lease) lives until the last chunk is written.
struct Running {
  std::shared_ptr<RequestRun> request;  // the lease, the cancel token, the outcome
  CompletionRequest req;
  bool chat = false;
  std::optional<Millis> keep_alive;  // the request's own
  std::string chat_template;  // the model's own setting, else --chat-template, else the file's
  bool jinja = true;          // the model's own setting, else --no-jinja's
  ChatReader reader;          // a chat's reply, read by its template's format
  std::unique_ptr<Answer> answer;  // the reply in its API's shapes
  // A resumable stream's session (server/stream_sessions.h), written as
  // the client is; the run goes on without the client while it is kept.
  std::shared_ptr<StreamSession> session;
  StreamSessions* sessions = nullptr;
  bool streamed = false;  // the stream's body ran
  // The request's images, preprocessed where its prompt is (prepare); a
  // scope of its own, not under the model's, since the run
  // may let go of its lease before it is destroyed. Last: it goes first.
  std::unique_ptr<Scope> images;
};

// Once a model name: that a model without a template of its own is served
// with chatml, as llama-server does.
void say_fallback_once(const std::string& model) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(model).second) {
    std::fprintf(stderr, "reclaim: model '%s' has no chat template: chats with it use chatml\n", model.c_str());
  }
}

// A template that does not parse, or that goes over a bound, is the
// model's defect (its file's, or the template its settings give it), as a
// damaged tensor is: a 422. One stopped because its client left is
// answered to nobody; one stopped by an unload is a 503, as a decode is.
[[noreturn]] void template_failed(const RequestRun& request, const Error& e, bool stopped) {
  if (!stopped) throw ApiException(ApiError{422, "invalid_request_error", "invalid_model_file", e.what(), 0});
  if (request.client_gone()) throw ClientGone(e.what());
  throw ApiException(ApiError{503, "server_error", "cancelled", "the request was cancelled: its model is being unloaded", 5});
}

void render_chat(Running& run, Model& model) {
  GenerateRequest& g = run.req.generate;
  TemplateBounds bounds;
  const RequestRun& request = *run.request;
  bounds.stop = [&request] { return request.cancel().cancelled() || request.client_gone(); };
  std::unique_ptr<ChatTemplate> tmpl;
  try {
    tmpl = std::make_unique<ChatTemplate>(model, run.chat_template, bounds, run.jinja);
  } catch (const ChatError& e) {
    template_failed(request, e, false);
  } catch (const TemplateOverBound& e) {
    template_failed(request, e, false);
  } catch (const TemplateStopped& e) {
    template_failed(request, e, true);
  }
  if (tmpl->uses_fallback()) say_fallback_once(run.req.model);
  run.req.chat_input.json_schema = run.req.json_schema;
  ChatRender r;
  try {
    r = tmpl->render(run.req.chat_input, bounds);
  } catch (const ChatError& e) {
    bad_field(e.param(), e.what(), "invalid_chat");
  } catch (const TemplateOverBound& e) {
    template_failed(request, e, false);
  } catch (const TemplateStopped& e) {
    template_failed(request, e, true);
  }
  g.prompt = std::move(r.prompt);
  g.grammar = std::move(r.grammar);
  g.preserved_tokens = std::move(r.preserved_tokens);
  for (std::string& s : r.stops) g.stop.push_back(std::move(s));
  run.reader = std::move(r.reader);
}

// The reply's grammar: the client's own GBNF, or what its JSON schema or
// tools made. llama.cpp parses it against the model's vocabulary, so it is
// checked once the model is held, before any decode, so that a bad one is a
// 400 naming the field it came from and not an error in the middle of a
// stream (a schema's "minLength": 5000000 makes a repetition llama.cpp's
// parser refuses).
void constrain(Running& run, Model& model) {
  GrammarSpec& g = run.req.generate.grammar;
  std::string field;
  if (!run.req.grammar.empty()) {
    g = GrammarSpec{};
    g.gbnf = run.req.grammar;
    field = "grammar";
  } else if (!g.gbnf.empty()) {
    field = run.req.json_schema.empty() ? "tools" : "response_format";
  } else {
    return;
  }
  bool parses = false;
  try {
    parses = grammar_parses(model.vocab(), g.gbnf);
  } catch (const GrammarTooLarge& e) {
    bad_field(field, "'" + field + "' makes a grammar over a bound: " + e.what());
  }
  if (!parses) {
    bad_field(field, field == "grammar" ? "'grammar' is not a GBNF grammar llama.cpp can parse"
                                        : "'" + field + "' makes a grammar llama.cpp cannot parse (a repetition of more "
                                          "than 2000, or a construct its converter does not take)");
  }
}

// Once the model is held: the prompt from the chat template, tokenized once
// (generate then takes the tokens) and checked against the vocabulary and
// the context as the engine would (BadPrompt and ContextOverflow are 400s).
void prepare(Running& run) {
  GenerateRequest& g = run.req.generate;
  Model& model = run.request->model();
  // Its replies would be empty, and llama.cpp asserts on any text it is given.
  if (!has_tokenizer(model.vocab())) {
    throw NoTokenizer("model '" + run.req.model + "' has no tokenizer (llama.cpp's no_vocab): it reads and writes token ids "
                      "only, and this endpoint answers in text");
  }
  if (run.chat) {
    render_chat(run, model);
  } else if (run.req.infill) {
    std::string missing;
    if (!has_fim_tokens(model.vocab(), &missing)) {
      bad_request("model '" + run.req.model + "' has no fill-in-the-middle tokens (its vocabulary lacks the " + missing +
                      " token): /infill needs a code model that has them",
                  "infill_not_supported");
    }
    const std::vector<llama_token> middle =
        g.prompt_tokens.empty() ? tokenize(model.vocab(), run.req.prompt, false, false) : g.prompt_tokens;
    const Batcher& batch = *model.batcher();
    g.prompt_tokens = infill_prompt(model.vocab(), *run.req.infill, middle, batch.n_batch(), g.max_tokens, batch.n_ctx_seq());
  } else {
    g.prompt = run.req.prompt;
  }
  constrain(run, model);
  const int32_t n_vocab = llama_vocab_n_tokens(model.vocab());
  for (const llama_logit_bias& b : g.sampling.logit_bias) {
    if (b.token >= n_vocab) {
      bad_field("logit_bias", "'logit_bias' has token id " + std::to_string(b.token) + ", outside this model's vocabulary of " +
                                  std::to_string(n_vocab));
    }
  }
  if (run.req.ignore_eos) {
    // As llama-server does: each end-of-generation token's logit is -inf.
    for (llama_token t = 0; t < n_vocab; ++t) {
      if (llama_vocab_is_eog(model.vocab(), t)) g.sampling.logit_bias.push_back({t, -INFINITY});
    }
  }
  if (!g.images.empty()) {
    // Its text is tokenized around the images with them
    // (engine/image_prompt.h), once the model is held: before a stream's
    // headers where the model was ready within --stream-hold, else inside
    // the stream, whose error event then says what was wrong.
    if (!model.projector()) {
      throw BadImage("model '" + run.req.model + "' takes no images: it has no projector (give it one with --mmproj, or "
                     "'mmproj' in --config)");
    }
    // Decoded and preprocessed here, on the HTTP thread, so that the batch
    // finds them ready; the files' bytes are not needed after.
    const Batcher& batch = *model.batcher();
    run.images = std::make_unique<Scope>(next_request_name() + " images");
    auto prompt = std::make_shared<ImagePrompt>(*run.images, *model.projector(), g.prompt, g.images, g.add_special);
    check_context_fits(static_cast<int32_t>(prompt->tokens().size()), g.max_tokens, batch.n_ctx_seq());
    g.image_prompt = std::move(prompt);
    g.images.clear();
    g.images.shrink_to_fit();
    return;
  }
  // The model's own context a sequence, as its batch was made.
  g.prompt_tokens = prompt_tokens(model.vocab(), g, model.batcher()->n_ctx_seq());
  if (run.req.native_probs || run.req.verbose) {
    for (llama_token t : g.prompt_tokens) run.req.prompt_shown += token_piece(model.vocab(), t, true);
  }
}

// On the model's batch (the registry starts one with every load), with the
// run's tick and cancel token.
GenerateResult run_generation(Running& run, GenerateHooks hooks) {
  RequestRun& request = *run.request;
  hooks.tick = [&request] { request.tick(); };
  return request.model().batcher()->generate(run.req.generate, hooks, &request.cancel());
}

// Stopped by an unload before its first token (its template's render was
// cut short): what a generation cancelled by an unload is.
bool stopped_by_unload(const std::exception& ex) {
  const auto* api = dynamic_cast<const ApiException*>(&ex);
  return api && api->error().code == "cancelled";
}

// The tokens' log-probabilities in the shape the request's API has.
json logprobs_json(const Running& run, const llama_vocab* vocab, const std::vector<TokenLogprob>& entries, size_t offset) {
  if (run.req.native_probs) return native_probs_json(vocab, entries, run.req.generate.post_sampling);
  return run.chat ? chat_logprobs_json(vocab, entries) : completion_logprobs_json(vocab, entries, offset);
}

// One generation of a request answered whole, in its API's shape; empty
// where nobody reads it (its client left) or it was cancelled (`res` has the
// error then).
std::optional<std::string> one_whole(httplib::Response& res, Running& run) {
  RequestRun& request = *run.request;
  const GenerateResult r = run_generation(run, {});
  const RunEnd end = request.finish(r);
  if (end == RunEnd::client_gone || (r.finish == FinishReason::cancelled && r.cancel_reason == CancelReason::client_gone)) {
    return std::nullopt;
  }
  if (end == RunEnd::cancelled || r.finish == FinishReason::cancelled) {
    run.answer->send_error(res, {503, "server_error", "cancelled", "the request was cancelled: its model is being unloaded", 5});
    return std::nullopt;
  }
  json logprobs;
  std::optional<ChatReply> reply;
  if (run.chat) {
    run.reader.push(r.text);
    reply = run.reader.finish();
  }
  if (run.req.generate.logprobs >= 0) {
    const llama_vocab* vocab = request.model().vocab();
    logprobs = logprobs_json(run, vocab, r.logprobs, 0);
  }
  return run.answer->whole(r, reply ? &*reply : nullptr, logprobs);
}

// A request not streamed: held, generated (OpenAI's n times), answered whole.
void answer_whole(httplib::Response& res, Running& run) {
  RequestRun& request = *run.request;
  if (run.req.choices > 1 && !run.answer->has_choices()) {
    bad_field("n", "'n' above 1 is for OpenAI's completions and chat completions, whose replies are lists of choices",
              "unsupported_n");
  }
  try {
    request.hold(run.req.model, run.keep_alive);
  } catch (const ClientGone&) {
    return;  // counted by the run; nobody reads an answer
  }
  prepare(run);
  run.answer->held();
  std::optional<std::string> first = one_whole(res, run);
  if (!first) return;
  if (run.req.choices == 1) {
    res.set_content(*first, "application/json");
    return;
  }
  // The others after it, each with a fresh reader (a chat's reads one reply:
  // the template is rendered again for it, the prepared request kept) and,
  // where the request set a seed, the next seed: n draws with one seed would
  // be one answer n times. The prompt is in the cache by then.
  json all = json::parse(*first);
  for (int i = 1; i < run.req.choices; ++i) {
    if (run.chat) {
      GenerateRequest prepared = run.req.generate;
      render_chat(run, request.model());
      run.req.generate = std::move(prepared);
    }
    SamplingParams& sampling = run.req.generate.sampling;
    if (sampling.seed != LLAMA_DEFAULT_SEED) ++sampling.seed;
    const std::optional<std::string> next = one_whole(res, run);
    if (!next) return;
    json choice = json::parse(*next);
    choice["choices"][0]["index"] = i;
    all["choices"].push_back(choice["choices"][0]);
    if (all.contains("usage") && choice.contains("usage")) {
      // The prompt once, as OpenAI counts it; every choice's completion.
      json& u = all["usage"];
      u["completion_tokens"] = u["completion_tokens"].get<int64_t>() + choice["usage"]["completion_tokens"].get<int64_t>();
      u["total_tokens"] = u["prompt_tokens"].get<int64_t>() + u["completion_tokens"].get<int64_t>();
    }
  }
  res.set_content(all.dump(), "application/json");
}

// One stream's body, written as text comes: its sink, whether its client is
// gone, and the logprobs that wait to ride with the next chunk that carries
// text (a chat's parser may hold text back a while).
class Stream {
 public:
  // `sink` null: a resumable stream whose client left before its headers,
  // written to its session alone.
  Stream(Running& run, httplib::DataSink* sink)
      : run_(run), sink_(sink), answer_(*run.answer), request_(*run.request), gone_(sink == nullptr) {}

  // The whole body; false where the client left (httplib ends it).
  bool run(Millis keepalive) {
    run_.streamed = true;
    Defer finished([this] {
      if (run_.session) run_.sessions->finish(*run_.session);
    });
    GenerateResult r;
    try {
      if (!request_.held()) hold(keepalive);
      r = run_generation(run_, hooks());
    } catch (const ClientGone&) {
      request_.client_left();
      return false;
    } catch (const std::exception& ex) {
      if (!stopped_by_unload(ex)) return fail(ex);
      r.finish = FinishReason::cancelled;
    }
    if (request_.finish(r) == RunEnd::client_gone) return false;
    std::optional<ChatReply> reply;
    if (run_.chat) {
      std::vector<ChatDelta> rest;
      reply = run_.reader.finish(&rest);
      send_deltas(rest);
    }
    write(answer_.end(r, reply ? &*reply : nullptr, pending_.empty() ? json(nullptr) : take_logprobs()));
    return done();
  }

 private:
  // Waits for the model with an SSE comment every `keepalive`, so that
  // proxies keep the stream, then checks the prompt.
  void hold(Millis keepalive) {
    auto last = std::chrono::steady_clock::now();
    request_.hold(run_.req.model, run_.keep_alive, [&] {
      const auto t = std::chrono::steady_clock::now();
      if (t - last < keepalive) return;
      last = t;
      write(answer_.waiting());
    });
    prepare(run_);
    answer_.held();
  }

  // A failed write means the client is gone: the request stops before its
  // next decode step, unless its session keeps it. (A request cancelled by
  // an unload still writes its end.)
  void write(const std::string& data) {
    if (data.empty()) return;
    if (run_.session) run_.session->append(data);
    if (gone_) return;
    if (!sink_->write(data.data(), data.size())) {
      gone_ = true;
      if (!run_.session) request_.client_left();
    }
  }

  // The body's end: false where the client has gone (httplib closes).
  bool done() {
    if (gone_) return false;
    sink_->done();
    return true;
  }

  bool fail(const std::exception& ex) {
    request_.fail();
    write(answer_.stream_error(to_api_error(ex)));
    return done();
  }

  GenerateHooks hooks() {
    GenerateHooks h;
    if (run_.req.return_progress) h.on_prompt_progress = [this](const PromptProgress& p) { write(answer_.progress(p)); };
    if (run_.req.timings_per_token) h.on_timings = [this](const Timings& t) { answer_.live_timings(timings_json(t)); };
    h.on_logprobs = [this](std::vector<TokenLogprob> entries) {
      for (TokenLogprob& e : entries) pending_.push_back(std::move(e));
    };
    h.on_text = [this](std::string_view text) {
      if (run_.chat) {
        send_deltas(run_.reader.push(text));
      } else {
        write(answer_.text(text, take_logprobs()));
      }
    };
    return h;
  }

  json take_logprobs() {
    if (run_.req.generate.logprobs < 0) return nullptr;
    const llama_vocab* vocab = request_.model().vocab();
    json j = logprobs_json(run_, vocab, pending_, text_offset_);
    for (const TokenLogprob& e : pending_) text_offset_ += token_piece(vocab, e.token).size();
    pending_.clear();
    return j;
  }

  void send_deltas(const std::vector<ChatDelta>& deltas) {
    for (const ChatDelta& d : deltas) write(answer_.delta(d, take_logprobs()));
  }

  Running& run_;
  httplib::DataSink* sink_;
  Answer& answer_;
  RequestRun& request_;
  bool gone_ = false;
  std::vector<TokenLogprob> pending_;
  size_t text_offset_ = 0;
};

}  // namespace

ModelSettings Server::settings_if_known(const std::string& model) {
  if (model.empty()) return {};
  try {
    return settings_of(model);
  } catch (const UnknownModel&) {
  } catch (const BadModelName&) {
  }
  return {};
}

ModelSettings Server::settings_of(const std::string& model) {
  try {
    return registry_.settings(model);
  } catch (const UnknownModel&) {
    // A file added to --models-dir after the start.
    if (!options_.rediscover || !options_.rediscover()) throw;
  }
  return registry_.settings(model);
}

void Server::complete(const httplib::Request& http_req, httplib::Response& res, const CompletionCall& call,
                      std::shared_ptr<RequestRun> request) {
  auto run = std::make_shared<Running>();
  run->request = std::move(request);
  // The model's own settings: its template, and the fields a request that
  // leaves them out gets; the body is parsed once, with them.
  const ModelSettings settings = settings_if_known(call.model);
  run->req = call.parse(settings.request_defaults);
  if (run->req.chat && settings.system) add_default_system(run->req.chat_input, *settings.system);
  run->chat_template = settings.chat_template.value_or(options_.chat_template);
  run->jinja = settings.jinja.value_or(options_.jinja);
  run->chat = run->req.chat;
  run->req.generate.grammar_token_time = options_.grammar_token_time;
  run->keep_alive = requested_keep_alive(run->req.keep_alive_ms);
  run->answer = call.answer(run->req);
  try {
    validate(run->req.generate.sampling);
  } catch (const Error& e) {
    bad_request(e.what());
  }
  if (!run->req.stream) {
    answer_whole(res, *run);
    return;
  }

  // A conversation's stream is resumable: its session is there from now
  // (a resume while the model loads is told to retry), and it goes where
  // the request is refused before its stream starts.
  run->session = open_stream(http_req, *run->request);
  if (run->session) run->sessions = sessions_.get();
  Defer refused([&] {
    if (run->session) sessions_->forget(run->session->id(), run->session.get());
  });
  // A stream stopped (DELETE /v1/stream) before it started is refused so.
  auto stopped = [&] {
    if (run->session && run->session->cancelled()) {
      throw ApiException(ApiError{400, "invalid_request_error", "cancelled",
                                  "the stream was cancelled (DELETE /v1/stream) before it started", 0});
    }
  };
  // What is wrong with the request is a status, not an event in a stream,
  // whenever its model is held within --stream-hold: at once where it is
  // ready, or after a load (its own, which is never cut short, or another's
  // under way) or a wait for a slot. A refusal (a full line, an unknown
  // model) is one too. Past the bound, the stream starts and keeps proxies
  // awake with comments while it waits on, in the same place in the line.
  try {
    if (run->request->hold_now(run->req.model, run->keep_alive) ||
        run->request->hold_until(run->req.model, run->keep_alive, std::chrono::steady_clock::now() + options_.stream_hold)) {
      stopped();
      prepare(*run);
      run->answer->held();
    }
  } catch (const ClientGone&) {
    stopped();
    return;  // nobody to answer; the run is counted so
  }
  std::move(refused).cancel();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: pass each event on as it comes
  const Millis keepalive = options_.stream_keepalive;
  res.set_chunked_content_provider(
      run->answer->stream_type(),
      [run, keepalive](size_t, httplib::DataSink& sink) { return Stream(*run, &sink).run(keepalive); },
      // The lease goes with the response, whether or not the stream ran. A
      // stream that did not run to its end without a word of why lost its
      // client (httplib could not write it); a resumable one runs to its
      // end for its session all the same.
      [run, keepalive](bool done) {
        if (!done && run->session && !run->streamed) (void)Stream(*run, nullptr).run(keepalive);
        if (!done && !run->session) run->request->client_left();
        run->request->release();
      });
}

std::vector<llama_token> Server::render_only(std::shared_ptr<RequestRun> request, const json& body, std::string& prompt) {
  Running run;
  run.request = std::move(request);
  const ModelSettings settings = settings_if_known(named_model(body));
  run.req = parse_completion_request(body, true, settings.request_defaults);
  run.chat_template = settings.chat_template.value_or(options_.chat_template);
  run.jinja = settings.jinja.value_or(options_.jinja);
  run.chat = true;
  run.request->hold(run.req.model, std::nullopt);
  const llama_vocab* vocab = run.request->model().vocab();
  // The template reads the model's special tokens as text.
  if (!has_tokenizer(vocab)) {
    throw NoTokenizer("model '" + run.req.model + "' has no tokenizer (llama.cpp's no_vocab): it has no chat template to apply");
  }
  render_chat(run, run.request->model());
  prompt = run.req.generate.prompt;
  return tokenize(vocab, prompt, run.req.generate.add_special);
}

}  // namespace reclaim::server
