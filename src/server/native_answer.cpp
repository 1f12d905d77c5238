// llama-server's own shape of a completion's reply (POST /completion and
// /completions): {"content", "stop", "tokens_predicted", ...}, and as a
// stream, the same objects as server-sent events without a [DONE].
#include <httplib.h>

#include <algorithm>
#include <cmath>

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

// What the generation ran with, in llama-server's names; a bias of -inf
// (ignore_eos's) is null, as llama-server writes it.
json settings(const CompletionRequest& req) {
  const GenerateRequest& g = req.generate;
  const SamplingParams& s = g.sampling;
  json bias = json::array();
  for (const llama_logit_bias& b : s.logit_bias) {
    bias.push_back({{"token", b.token}, {"bias", std::isfinite(b.bias) ? json(b.bias) : json()}});
  }
  return {{"n_predict", g.max_tokens},
          {"seed", s.seed},
          {"temperature", s.temperature},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"repeat_last_n", s.repeat_last_n},
          {"repeat_penalty", s.repeat_penalty},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"stop", g.stop},
          {"ignore_eos", req.ignore_eos},
          {"logit_bias", bias},
          {"n_probs", std::max(0, g.logprobs)},
          {"stream", req.stream},
          {"cache_prompt", g.cache_prompt}};
}

}  // namespace

json native_json(const CompletionRequest& req, const GenerateResult& r, const json& logprobs, bool return_tokens) {
  json j = {{"index", 0},
            {"content", r.text},
            {"tokens", return_tokens ? json(r.tokens) : json::array()},
            {"id_slot", -1},
            {"stop", true},
            {"model", req.model},
            {"tokens_predicted", r.timings.generated_tokens},
            {"tokens_evaluated", r.timings.prompt_tokens},
            {"tokens_cached", r.timings.cached_tokens},
            {"has_new_line", r.text.find('\n') != std::string::npos},
            {"truncated", false},
            {"stop_type", stop_type(r.finish)},
            {"stopping_word", r.stop},
            {"timings", timings_json(r)},
            {"prompt", req.prompt_shown},
            {"generation_settings", settings(req)}};
  if (!logprobs.is_null() && !logprobs.empty()) j["completion_probabilities"] = logprobs;
  return j;
}

namespace {

class NativeAnswer : public Answer {
 public:
  NativeAnswer(const CompletionRequest& req, NativeOptions options) : req_(req), options_(std::move(options)) {}

  void send_error(httplib::Response& res, const ApiError& e) const override { server::send_error(res, e); }

  std::string whole(const GenerateResult& r, const ChatReply*, const json& logprobs) override {
    json j = native_json(req_, r, logprobs, options_.return_tokens);
    if (options_.response_fields.empty()) return j.dump();
    // As llama-server cuts it: each path's value under the path's name; a
    // path that leads nowhere is left out.
    json cut = json::object();
    for (const std::string& path : options_.response_fields) {
      const json* at = &j;
      for (size_t from = 0; at && from <= path.size();) {
        const size_t slash = std::min(path.find('/', from), path.size());
        const std::string key = path.substr(from, slash - from);
        at = at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
        from = slash + 1;
      }
      if (at) cut[path] = *at;
    }
    return cut.dump();
  }

  const char* stream_type() const override { return "text/event-stream"; }
  std::string waiting() const override { return ": waiting for model '" + req_.model + "'\n\n"; }

  // One token's probabilities a chunk, as llama-server streams them: tokens
  // whose text came out together (a character's bytes, a stop string's
  // prefix held back) each get a chunk, the text riding with the last.
  std::string text(std::string_view text, const json& logprobs) override {
    std::string out;
    const size_t n = logprobs.is_array() ? logprobs.size() : 0;
    for (size_t i = 0; i + 1 < n; ++i) out += sse(chunk("", json::array({logprobs[i]})));
    return out + sse(chunk(text, n > 1 ? json::array({logprobs[n - 1]}) : logprobs));
  }

  std::string progress(const PromptProgress& p) override {
    json c = chunk("", nullptr);
    c["tokens_predicted"] = 0;
    c["tokens_evaluated"] = p.total;
    c["prompt_progress"] = progress_json(p);
    if (req_.timings_per_token) c["timings"] = timings_json(p);
    return sse(c);
  }

  std::string delta(const ChatDelta& d, const json& logprobs) override { return text(d.content, logprobs); }

  std::string end(const GenerateResult& r, const ChatReply*, const json& logprobs) override {
    json j = native_json(req_, r, logprobs, options_.return_tokens);
    j["content"] = "";  // the text came in the chunks before
    return sse(j);
  }

  std::string stream_error(const ApiError& e) override { return sse(error_json(e)); }

 private:
  json chunk(std::string_view text, const json& logprobs) const {
    json c = {{"index", 0}, {"content", std::string(text)}, {"stop", false}, {"id_slot", -1}};
    if (!logprobs.is_null() && !logprobs.empty()) c["completion_probabilities"] = logprobs;
    if (!live_.is_null()) c["timings"] = live_;
    return c;
  }

  const CompletionRequest& req_;
  const NativeOptions options_;
};

}  // namespace

std::unique_ptr<Answer> native_answer(const CompletionRequest& req, const NativeOptions& options) {
  return std::make_unique<NativeAnswer>(req, options);
}

}  // namespace reclaim::server
