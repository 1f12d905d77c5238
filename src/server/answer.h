// How a completion's reply is written: the request runs the same way for
// every API (server/completion.cpp), and its Answer gives it the API's
// shapes: OpenAI's JSON and server-sent events (server/openai_answer.cpp), or
// Ollama's JSON and NDJSON lines (server/ollama_answer.cpp). One a request:
// it may keep what its stream has sent so far.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/chat.h"
#include "engine/generate.h"
#include "server/openai.h"

namespace httplib {
struct Response;
}

namespace reclaim::server {

class Answer {
 public:
  virtual ~Answer() = default;
  // A request that failed before its reply began.
  virtual void send_error(httplib::Response& res, const ApiError& e) const = 0;
  // The model is held and the request is about to run (Ollama reports the
  // time until then as its load_duration).
  virtual void held() {}
  // The whole reply of a request that was not streamed, as JSON text.
  // `reply`: a chat's, read by its template; null for a plain completion.
  virtual std::string whole(const GenerateResult& r, const ChatReply* reply, const nlohmann::json& logprobs) = 0;
  // Whether a whole reply is a list of choices (OpenAI's `n`).
  virtual bool has_choices() const { return false; }

  virtual const char* stream_type() const = 0;
  // Sent every stream_keepalive while a stream waits for its model; empty:
  // nothing (a format without comments).
  virtual std::string waiting() const = 0;
  // A completion's text as it comes, and a chat's deltas.
  virtual std::string text(std::string_view text, const nlohmann::json& logprobs) = 0;
  virtual std::string delta(const ChatDelta& d, const nlohmann::json& logprobs) = 0;
  // The stream's last events; `logprobs`: those still owed.
  virtual std::string end(const GenerateResult& r, const ChatReply* reply, const nlohmann::json& logprobs) = 0;
  // A failure after the stream began, and its end.
  virtual std::string stream_error(const ApiError& e) = 0;
  // A report of the prompt's decode (return_progress), as the stream's
  // chunk; empty where the API has none.
  virtual std::string progress(const PromptProgress&) { return ""; }
  // The timings so far, which the chunks after it carry (timings_per_token).
  void live_timings(nlohmann::json t) { live_ = std::move(t); }

 protected:
  nlohmann::json live_;  // null: chunks carry no timings
};

// OpenAI's (server/openai_answer.cpp).
std::unique_ptr<Answer> openai_answer(const CompletionRequest& req);
// llama-server's own (server/native_answer.cpp); the generated token ids
// are in the whole reply when `return_tokens`.
struct NativeOptions {
  bool return_tokens = false;  // the generated ids in the whole reply's "tokens"
  // llama-server's response_fields: the whole reply cut to these fields,
  // each a path ("generation_settings/n_predict") and named by it.
  std::vector<std::string> response_fields;
};
std::unique_ptr<Answer> native_answer(const CompletionRequest& req, const NativeOptions& options);
// The whole reply in llama-server's native shape: /completion's, and the
// "__verbose" of another API's reply when the request asks for it.
nlohmann::json native_json(const CompletionRequest& req, const GenerateResult& r, const nlohmann::json& logprobs,
                           bool return_tokens);

// One server-sent event of `j`, as OpenAI's and llama-server's streams send
// them.
std::string sse(const nlohmann::json& j);

// What every API's reply ids and times are made of: a number unique in the
// process, and the time in unix seconds.
uint64_t next_reply_number();
int64_t unix_now();

}  // namespace reclaim::server
