// OpenAI's shapes of a completion's reply: the chat.completion and
// text_completion objects, and their chunks as server-sent events ending
// with `data: [DONE]`.
#include <httplib.h>

#include <atomic>
#include <chrono>

#include "server/answer.h"
#include "server/chat_reply.h"
#include "server/http_errors.h"

namespace reclaim::server {

using nlohmann::json;

uint64_t next_reply_number() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

namespace {

class OpenAiAnswer : public Answer {
 public:
  explicit OpenAiAnswer(const CompletionRequest& req)
      : req_(req), id_(std::string(req.chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_reply_number())),
        created_(unix_now()) {}

  bool has_choices() const override { return true; }

  void send_error(httplib::Response& res, const ApiError& e) const override { server::send_error(res, e); }

  std::string whole(const GenerateResult& r, const ChatReply* reply, const json& logprobs) override {
    json message;
    const char* finish = openai_finish_reason(r.finish);
    if (reply) {
      message = chat_message_json(*reply);
      finish = chat_finish_reason(r.finish, *reply);
    }
    json j = completion_json(req_, r, message, finish, id_, created_, logprobs);
    if (req_.verbose) j["__verbose"] = native_json(req_, r, logprobs, false);
    return j.dump();
  }

  const char* stream_type() const override { return "text/event-stream"; }
  std::string waiting() const override { return ": waiting for model '" + req_.model + "'\n\n"; }

  std::string text(std::string_view text, const json& logprobs) override {
    return sse(timed(chunk_json(req_, json(std::string(text)), nullptr, id_, created_, logprobs)));
  }

  std::string delta(const ChatDelta& d, const json& logprobs) override {
    return role() + sse(timed(chunk_json(req_, delta_json(d), nullptr, id_, created_, logprobs)));
  }

  // As llama-server's: a chunk with no text (a chat's carries the role, so
  // it counts as the stream's first), the report and the timings beside it.
  std::string progress(const PromptProgress& p) override {
    json c = chunk_json(req_, req_.chat ? role_delta_json() : json(""), nullptr, id_, created_);
    first_ = false;
    c["prompt_progress"] = progress_json(p);
    if (req_.timings_per_token) c["timings"] = timings_json(p);
    return sse(c);
  }

  std::string end(const GenerateResult& r, const ChatReply* reply, const json& logprobs) override {
    std::string out = reply ? role() : "";
    json last = reply ? chunk_json(req_, delta_json(ChatDelta{}), chat_finish_reason(r.finish, *reply), id_, created_, logprobs)
                      : chunk_json(req_, json(""), openai_finish_reason(r.finish), id_, created_, logprobs);
    // As llama-server's last chunks: clients that show speeds read it there.
    last["timings"] = timings_json(r);
    // As llama-server's: on the finishing chunk, the text that came before it
    // in the chunks' deltas.
    if (req_.verbose) last["__verbose"] = native_json(req_, r, nullptr, false);
    out += sse(last);
    if (req_.include_usage) {
      json u = chunk_json(req_, req_.chat ? json::object() : json(""), nullptr, id_, created_);
      u["choices"] = json::array();
      u["usage"] = usage_json(r);
      u["timings"] = last["timings"];
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  }

  std::string stream_error(const ApiError& e) override { return sse(error_json(e)) + "data: [DONE]\n\n"; }

 private:
  json timed(json chunk) const {
    if (!live_.is_null()) chunk["timings"] = live_;
    return chunk;
  }

  // The chat stream's first chunk, once: the role alone.
  std::string role() {
    if (!first_) return "";
    first_ = false;
    return sse(chunk_json(req_, role_delta_json(), nullptr, id_, created_));
  }

  const CompletionRequest& req_;
  std::string id_;
  int64_t created_;
  bool first_ = true;
};

}  // namespace

std::unique_ptr<Answer> openai_answer(const CompletionRequest& req) { return std::make_unique<OpenAiAnswer>(req); }

}  // namespace reclaim::server
