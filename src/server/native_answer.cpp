// llama-server's own shape of a completion's reply (POST /completion and
// /completions): {"content", "stop", "tokens_predicted", ...}, and as a
// stream, the same objects as server-sent events without a [DONE].
#include <httplib.h>

#include "server/answer.h"
#include "server/http_errors.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// How llama-server names why a generation ended.
const char* stop_type(FinishReason f) {
  switch (f) {
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "word";
    case FinishReason::length:
    case FinishReason::context: return "limit";
    case FinishReason::cancelled: break;
  }
  return "none";
}

class NativeAnswer : public Answer {
 public:
  NativeAnswer(const CompletionRequest& req, bool return_tokens) : req_(req), return_tokens_(return_tokens) {}

  void send_error(httplib::Response& res, const ApiError& e) const override { server::send_error(res, e); }

  std::string whole(const GenerateResult& r, const ChatReply*, const json& logprobs) override { return last(r, logprobs).dump(); }

  const char* stream_type() const override { return "text/event-stream"; }
  std::string waiting() const override { return ": waiting for model '" + req_.model + "'\n\n"; }

  std::string text(std::string_view text, const json& logprobs) override {
    json chunk = {{"index", 0}, {"content", std::string(text)}, {"stop", false}, {"id_slot", -1}};
    if (!logprobs.is_null() && !logprobs.empty()) chunk["completion_probabilities"] = logprobs;
    return sse(chunk);
  }

  std::string delta(const ChatDelta& d, const json& logprobs) override { return text(d.content, logprobs); }

  std::string end(const GenerateResult& r, const ChatReply*, const json& logprobs) override {
    json j = last(r, logprobs);
    j["content"] = "";  // the text came in the chunks before
    return sse(j);
  }

  std::string stream_error(const ApiError& e) override { return sse(error_json(e)); }

 private:
  json last(const GenerateResult& r, const json& logprobs) const {
    json j = {{"index", 0},
              {"content", r.text},
              {"tokens", return_tokens_ ? json(r.tokens) : json::array()},
              {"id_slot", -1},
              {"stop", true},
              {"model", req_.model},
              {"tokens_predicted", r.timings.generated_tokens},
              {"tokens_evaluated", r.timings.prompt_tokens},
              {"tokens_cached", r.timings.cached_tokens},
              {"has_new_line", r.text.find('\n') != std::string::npos},
              {"truncated", false},
              {"stop_type", stop_type(r.finish)},
              {"stopping_word", r.stop},
              {"timings", timings_json(r)}};
    if (!logprobs.is_null() && !logprobs.empty()) j["completion_probabilities"] = logprobs;
    return j;
  }

  const CompletionRequest& req_;
  bool return_tokens_;
};

}  // namespace

std::unique_ptr<Answer> native_answer(const CompletionRequest& req, bool return_tokens) {
  return std::make_unique<NativeAnswer>(req, return_tokens);
}

}  // namespace reclaim::server
