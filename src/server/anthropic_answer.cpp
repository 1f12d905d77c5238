// Anthropic's shapes of a reply: a message object with content blocks
// (thinking, text, tool_use), or its stream: message_start, then each
// block's content_block_start, its deltas and content_block_stop, then
// message_delta with the stop reason and message_stop; a ping while the
// stream waits for its model.
#include <httplib.h>

#include "server/anthropic.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

std::string event(const char* name, const json& data) { return std::string("event: ") + name + "\ndata: " + data.dump() + "\n\n"; }

const char* error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json error_body(const ApiError& e) { return {{"type", "error"}, {"error", {{"type", error_type(e.status)}, {"message", e.message}}}}; }

const char* stop_reason(FinishReason f, const ChatReply* reply) {
  if (f == FinishReason::eos || f == FinishReason::stop) {
    if (reply && !reply->tool_calls.empty()) return "tool_use";
    return f == FinishReason::eos ? "end_turn" : "stop_sequence";
  }
  return "max_tokens";  // the length, the context, or an unload's cut
}

class AnthropicAnswer : public Answer {
 public:
  explicit AnthropicAnswer(const CompletionRequest& req) : req_(req), id_("msg_" + std::to_string(next_reply_number())) {}

  void send_error(httplib::Response& res, const ApiError& e) const override { send_anthropic_error(res, e); }

  std::string whole(const GenerateResult& r, const ChatReply* reply, const json&) override {
    json content = json::array();
    const std::string text = reply ? reply->content : r.text;
    if (reply && !reply->reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", reply->reasoning}, {"signature", ""}});
    if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
    if (reply) {
      for (size_t i = 0; i < reply->tool_calls.size(); ++i) {
        const ToolCall& c = reply->tool_calls[i];
        json input = json::parse(c.arguments, nullptr, false);
        if (!input.is_object()) input = json::object();  // what a model wrote that is no object
        content.push_back({{"type", "tool_use"}, {"id", tool_id(c.id, i)}, {"name", c.name}, {"input", input}});
      }
    }
    json m = message(content, r.timings.prompt_tokens, r.timings.generated_tokens, r.timings.cached_tokens);
    m["stop_reason"] = stop_reason(r.finish, reply);
    m["stop_sequence"] = r.finish == FinishReason::stop && !(reply && !reply->tool_calls.empty()) ? json(r.stop) : json(nullptr);
    return m.dump();
  }

  const char* stream_type() const override { return "text/event-stream"; }
  std::string waiting() const override { return event("ping", {{"type", "ping"}}); }

  std::string text(std::string_view text, const json&) override {
    ChatDelta d;
    d.content = std::string(text);
    return delta(d, nullptr);
  }

  std::string delta(const ChatDelta& d, const json&) override {
    std::string out = start();
    if (!d.reasoning.empty()) {
      if (open_ != Block::thinking) out += open(Block::thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      out += block_delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
    }
    if (!d.content.empty()) {
      if (open_ != Block::text) out += open(Block::text, {{"type", "text"}, {"text", ""}});
      out += block_delta({{"type", "text_delta"}, {"text", d.content}});
    }
    if (d.tool_index != std::string::npos) {
      if (open_ != Block::tool || tool_ != d.tool_index) {
        out += open(Block::tool, {{"type", "tool_use"}, {"id", tool_id(d.tool.id, d.tool_index)}, {"name", d.tool.name}, {"input", json::object()}});
        tool_ = d.tool_index;
      }
      if (!d.tool.arguments.empty()) out += block_delta({{"type", "input_json_delta"}, {"partial_json", d.tool.arguments}});
    }
    return out;
  }

  std::string end(const GenerateResult& r, const ChatReply* reply, const json&) override {
    std::string out = start() + close();
    const bool calls = reply && !reply->tool_calls.empty();
    out += event("message_delta", {{"type", "message_delta"},
                                   {"delta",
                                    {{"stop_reason", stop_reason(r.finish, reply)},
                                     {"stop_sequence", r.finish == FinishReason::stop && !calls ? json(r.stop) : json(nullptr)}}},
                                   {"usage", usage(r.timings.prompt_tokens, r.timings.generated_tokens,
                                                   r.timings.cached_tokens)}});
    return out + event("message_stop", {{"type", "message_stop"}});
  }

  std::string stream_error(const ApiError& e) override { return close() + event("error", error_body(e)); }

 private:
  enum class Block { none, text, thinking, tool };

  // Anthropic counts the prompt's tokens read from a cache apart from those
  // it took in: here those the prompt cache held, which were not decoded.
  static json usage(int64_t prompt_tokens, int64_t output_tokens, int64_t cached) {
    return {{"input_tokens", prompt_tokens - cached}, {"cache_read_input_tokens", cached},
            {"cache_creation_input_tokens", 0}, {"output_tokens", output_tokens}};
  }
  json message(const json& content, int64_t input_tokens, int64_t output_tokens, int64_t cached) const {
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", req_.model},
            {"content", content},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr},
            {"usage", usage(input_tokens, output_tokens, cached)}};
  }
  // The template's parser gives an id where the model wrote one; Anthropic's
  // clients need one to answer the call with.
  std::string tool_id(const std::string& given, size_t index) const {
    return given.empty() ? "toolu_" + id_.substr(4) + "_" + std::to_string(index) : given;
  }

  // message_start, once, when the prompt's tokens are known.
  std::string start() {
    if (started_) return "";
    started_ = true;
    return event("message_start", {{"type", "message_start"},
                                   {"message", message(json::array(), static_cast<int64_t>(req_.generate.prompt_tokens.size()), 0, 0)}});
  }
  std::string close() {
    if (open_ == Block::none) return "";
    open_ = Block::none;
    return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }
  std::string open(Block b, const json& block) {
    std::string out = close();
    open_ = b;
    ++index_;
    return out + event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  std::string block_delta(const json& d) const {
    return event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }

  const CompletionRequest& req_;
  std::string id_;
  bool started_ = false;
  Block open_ = Block::none;
  int index_ = -1;
  size_t tool_ = std::string::npos;
};

}  // namespace

void send_anthropic_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
  res.set_content(error_body(e).dump(), "application/json");
}

std::unique_ptr<Answer> anthropic_answer(const CompletionRequest& req) { return std::make_unique<AnthropicAnswer>(req); }

}  // namespace reclaim::server
