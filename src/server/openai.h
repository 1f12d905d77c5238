// OpenAI's request and response shapes for /v1/completions and
// /v1/chat/completions: parsing with field-by-field validation (a bad field is
// a 400 that names it), and the JSON of results, stream chunks and errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat.h"
#include "engine/generate.h"
#include "server/infill.h"

namespace reclaim::server {

// An error with its HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code;  // e.g. "model_not_found"; may be empty
  std::string message;
  int retry_after = 0;  // seconds, for 429/503
  std::string param;    // the request's field that is wrong, when one is
  nlohmann::json more = nlohmann::json::object();  // fields of the error object beyond these
};
class ApiException : public std::exception {
 public:
  explicit ApiException(ApiError e) : error_(std::move(e)) {}
  const ApiError& error() const { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  ApiError error_;
};
[[noreturn]] void bad_request(const std::string& message, const std::string& code = "");
// A 400 for the field `param` (OpenAI's error.param), e.g. "messages[2].content".
[[noreturn]] void bad_field(const std::string& param, const std::string& message, const std::string& code = "");
nlohmann::json error_json(const ApiError& e);
inline constexpr int kMaxJsonDepth = 128;
// What a request of a server of several models that names none is told.
inline constexpr const char* kModelRequired =
    "'model' is required: this server has several models (GET /v1/models lists them) and no --default-model";
// The body as a JSON object; a 400 saying why when it is not one, or when it
// nests deeper than kMaxJsonDepth.
nlohmann::json parse_object(const std::string& body);

// The most choices (OpenAI's n) a request may ask for: each is a generation
// of its own, one after another on the request's sequence.
inline constexpr int kMaxChoices = 8;

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::string prompt;                 // /v1/completions
  ChatRequest chat_input;             // /v1/chat/completions: messages and tools (server/chat_request.h)
  std::string json_schema;            // response_format's or llama-server's json_schema, as JSON text
  std::string grammar;                // llama-server's "grammar": the client's own GBNF
  GenerateRequest generate;           // sampling, max_tokens, stop (prompt filled later for chat)
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  int choices = 1;                    // OpenAI's n: generations of the one prompt, answered whole
  std::optional<int64_t> keep_alive_ms;  // Ollama's keep_alive ("5m", seconds, -1)
  std::optional<InfillInput> infill;  // llama-server's /infill: `prompt` is the middle's start
  bool native_probs = false;  // llama-server's completion_probabilities, not OpenAI's logprobs
  // llama-server's ignore_eos: every end-of-generation token banned (a bias
  // of -inf, added once the model's vocabulary is known).
  bool ignore_eos = false;
  // llama-server's "verbose": the reply carries "__verbose", the request as
  // its native /completion would have answered it (the prompt as the model
  // read it, the settings it ran with), for a client that debugs a template.
  bool verbose = false;
  // llama-server's return_progress: a stream reports its prompt's decode, a
  // chunk a batch; timings_per_token: each chunk carries the timings so far.
  bool return_progress = false;
  bool timings_per_token = false;
  // llama-server's "prompt" of a /completion reply: the prompt's tokens as
  // text, special ones included (set once the prompt is tokenized).
  std::string prompt_shown;
};

// Throws ApiException (400) naming the field that is wrong. `defaults`: the
// fields a body that leaves them out (or sends null) gets, checked as its own.
CompletionRequest parse_completion_request(const std::string& body, bool chat,
                                           const nlohmann::json& defaults = nlohmann::json::object());
// The same of a body already parsed (another API's, in OpenAI's fields).
CompletionRequest parse_completion_request(nlohmann::json body, bool chat, const nlohmann::json& defaults);

// POST /v1/models/load {"model", "pin"} and /v1/models/unload {"model",
// "mode": "drain" | "cancel", "timeout"}.
struct ControlRequest {
  std::string model;
  bool pin = false;
  bool cancel = false;
  std::optional<int64_t> timeout_ms;
};
ControlRequest parse_control_request(const std::string& body, bool unload);
// POST /v1/models/pin {"model", "pin": true|false}; pin defaults to true.
ControlRequest parse_pin_request(const std::string& body);
// "5m", "30s", "1h", "250ms", a number of seconds, -1 (never) or 0.
int64_t parse_duration_ms(const nlohmann::json& v, const std::string& field);

// A request's stop strings, `field` naming them in the error: at most
// kMaxStops of at most kMaxStopBytes each (engine/text_stream.h).
void check_stops(const std::vector<std::string>& stops, const std::string& field);
// An embeddings request's `n` inputs: at most kMaxEmbedInputs (engine/embed.h).
void check_embed_inputs(size_t n, const std::string& field);

// The response object of a finished request; `reply`: a chat's, read by its
// template (server/chat_reply.h).
nlohmann::json completion_json(const CompletionRequest& req, const GenerateResult& r, const nlohmann::json& message,
                               const char* finish, const std::string& id, int64_t created,
                               const nlohmann::json& logprobs = nullptr);
// One server-sent-event chunk: a completion's `text`, or a chat's `delta`;
// `finish` set on the last one.
nlohmann::json chunk_json(const CompletionRequest& req, const nlohmann::json& delta_or_text, const char* finish,
                          const std::string& id, int64_t created, const nlohmann::json& logprobs = nullptr);
nlohmann::json usage_json(const GenerateResult& r);
// llama-server's "timings" object (its names, which its clients read): on a
// whole reply and on a stream's finishing chunk.
nlohmann::json timings_json(const GenerateResult& r);
nlohmann::json timings_json(const Timings& t);
// The timings of a prompt half decoded: its tokens so far, nothing generated.
nlohmann::json timings_json(const PromptProgress& p);
// llama-server's prompt_progress object.
nlohmann::json progress_json(const PromptProgress& p);
const char* openai_finish_reason(FinishReason f);

}  // namespace reclaim::server
