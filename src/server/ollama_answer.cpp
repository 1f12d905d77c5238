// Ollama's shapes of a reply: one JSON object, or NDJSON lines of pieces
// (`message` for /api/chat, `response` for /api/generate) with `done: false`,
// then one `done: true` with the reason and the durations in nanoseconds.
#include <httplib.h>

#include <cstdio>
#include <ctime>

#include "server/ollama.h"

namespace reclaim::server {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

std::string ollama_time(std::chrono::system_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ns % 1000000000));
  return buf;
}

int64_t ollama_ns(Steady::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

void send_ollama_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  res.set_content(json{{"error", e.message}}.dump(), "application/json");
}

namespace {

// Ollama's reasons: stop and length (an unload's cut is a reply cut short).
const char* done_reason(FinishReason f) {
  switch (f) {
    case FinishReason::eos:
    case FinishReason::stop: return "stop";
    default: return "length";
  }
}

// Ollama's tool call: the arguments as an object. Text that is not one (a
// model may write anything) is given as it came.
json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json args = json::parse(calls[i].arguments, nullptr, false);
    if (args.is_discarded()) args = calls[i].arguments;
    out.push_back({{"function", {{"index", i}, {"name", calls[i].name}, {"arguments", args}}}});
  }
  return out;
}

class OllamaAnswer : public Answer {
 public:
  OllamaAnswer(const CompletionRequest& req, OllamaEndpoint endpoint)
      : req_(req), endpoint_(endpoint), start_(Steady::now()), held_(start_) {}

  void send_error(httplib::Response& res, const ApiError& e) const override { send_ollama_error(res, e); }
  void held() override { held_ = Steady::now(); }

  std::string whole(const GenerateResult& r, const ChatReply* reply, const json&) override {
    json j = piece(reply ? reply->content : r.text, reply ? reply->reasoning : std::string());
    if (reply && !reply->tool_calls.empty() && endpoint_ == OllamaEndpoint::chat) {
      j["message"]["tool_calls"] = tool_calls_json(reply->tool_calls);
    }
    finish(j, r);
    return j.dump();
  }

  const char* stream_type() const override { return "application/x-ndjson"; }
  // Ollama's clients read every line as JSON: a stream that waits says nothing.
  std::string waiting() const override { return ""; }

  std::string text(std::string_view text, const json&) override { return line(piece(std::string(text), "")); }

  std::string delta(const ChatDelta& d, const json&) override {
    // A tool call goes whole, once the reply is read (Ollama's way).
    if (d.content.empty() && d.reasoning.empty()) return "";
    return line(piece(d.content, d.reasoning));
  }

  std::string end(const GenerateResult& r, const ChatReply* reply, const json&) override {
    std::string out;
    if (reply && !reply->tool_calls.empty() && endpoint_ == OllamaEndpoint::chat) {
      json calls = piece("", "");
      calls["message"]["tool_calls"] = tool_calls_json(reply->tool_calls);
      out += line(calls);
    }
    json last = piece("", "");
    finish(last, r);
    return out + line(last);
  }

  std::string stream_error(const ApiError& e) override { return line(json{{"error", e.message}}); }

 private:
  static std::string line(const json& j) { return j.dump() + "\n"; }

  json piece(const std::string& content, const std::string& thinking) const {
    json j = {{"model", req_.model}, {"created_at", ollama_time(std::chrono::system_clock::now())}};
    if (endpoint_ == OllamaEndpoint::chat) {
      json m = {{"role", "assistant"}, {"content", content}};
      if (!thinking.empty()) m["thinking"] = thinking;
      j["message"] = m;
    } else {
      j["response"] = content;
      if (!thinking.empty()) j["thinking"] = thinking;
    }
    j["done"] = false;
    return j;
  }

  void finish(json& j, const GenerateResult& r) const {
    j["done"] = true;
    j["done_reason"] = done_reason(r.finish);
    j["total_duration"] = ollama_ns(Steady::now() - start_);
    j["load_duration"] = ollama_ns(held_ - start_);
    j["prompt_eval_count"] = r.timings.prompt_tokens;
    j["prompt_eval_duration"] = static_cast<int64_t>(r.timings.prompt_ms * 1e6);
    j["eval_count"] = r.timings.generated_tokens;
    j["eval_duration"] = static_cast<int64_t>(r.timings.generate_ms * 1e6);
  }

  const CompletionRequest& req_;
  OllamaEndpoint endpoint_;
  Steady::time_point start_, held_;
};

}  // namespace

std::unique_ptr<Answer> ollama_answer(const CompletionRequest& req, OllamaEndpoint endpoint) {
  return std::make_unique<OllamaAnswer>(req, endpoint);
}

}  // namespace reclaim::server
