// The Responses API's shapes of a reply: a response object whose output
// holds a reasoning item, a message with its output_text and function_call
// items; or its stream: response.created and response.in_progress, each
// item's output_item.added, its deltas and its .done events, then
// response.completed (or response.incomplete when the tokens ran out).
// Every event has its sequence_number.
#include <httplib.h>

#include "server/http_errors.h"
#include "server/responses.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

bool incomplete(FinishReason f) { return f != FinishReason::eos && f != FinishReason::stop; }

class ResponsesAnswer : public Answer {
 public:
  explicit ResponsesAnswer(const CompletionRequest& req) : req_(req), n_(std::to_string(next_reply_number())), created_(unix_now()) {}

  void send_error(httplib::Response& res, const ApiError& e) const override { server::send_error(res, e); }

  std::string whole(const GenerateResult& r, const ChatReply* reply, const json&) override {
    json output = json::array();
    if (reply && !reply->reasoning.empty()) output.push_back(reasoning_item(reply->reasoning));
    const std::string text = reply ? reply->content : r.text;
    if (!text.empty() || !reply || reply->tool_calls.empty()) output.push_back(message_item(text, "completed"));
    if (reply) {
      for (size_t i = 0; i < reply->tool_calls.size(); ++i) {
        const ToolCall& c = reply->tool_calls[i];
        output.push_back(call_item(i, c.id, c.name, c.arguments, "completed"));
      }
    }
    return response(r, output).dump();
  }

  const char* stream_type() const override { return "text/event-stream"; }
  std::string waiting() const override { return ": waiting for model '" + req_.model + "'\n\n"; }

  std::string text(std::string_view text, const json&) override {
    ChatDelta d;
    d.content = std::string(text);
    return delta(d, nullptr);
  }

  std::string delta(const ChatDelta& d, const json&) override {
    std::string out = start();
    if (!d.reasoning.empty()) {
      if (open_ != Item::reasoning) {
        out += open(Item::reasoning, reasoning_item(""));
        // The SDK's stream reads a delta into a part that was added first.
        out += event("response.content_part.added", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", reasoning_part("")}});
      }
      text_ += d.reasoning;
      out += event("response.reasoning_text.delta", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"delta", d.reasoning}});
    }
    if (!d.content.empty()) {
      if (open_ != Item::message) {
        out += open(Item::message, message_item("", "in_progress"));
        out += event("response.content_part.added", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", text_part("")}});
      }
      text_ += d.content;
      json data = {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"delta", d.content}, {"logprobs", json::array()}};
      if (!live_.is_null()) data["timings"] = live_;  // llama-server's timings_per_token
      out += event("response.output_text.delta", std::move(data));
    }
    if (d.tool_index != std::string::npos) {
      if (open_ != Item::call || tool_ != d.tool_index) {
        tool_ = d.tool_index;
        call_id_ = d.tool.id;
        call_name_ = d.tool.name;
        out += open(Item::call, call_item(tool_, call_id_, call_name_, "", "in_progress"));
      }
      if (!d.tool.arguments.empty()) {
        text_ += d.tool.arguments;
        out += event("response.function_call_arguments.delta", {{"item_id", item_id_}, {"output_index", index_}, {"delta", d.tool.arguments}});
      }
    }
    return out;
  }

  std::string end(const GenerateResult& r, const ChatReply*, const json&) override {
    std::string out = start();
    out += close();
    // llama-server's timings beside the response, as on its other streams' ends.
    return out + event(incomplete(r.finish) ? "response.incomplete" : "response.completed",
                       {{"response", response(r, items_)}, {"timings", timings_json(r)}});
  }

  // llama-server's return_progress: response.in_progress again, the report
  // beside the response.
  std::string progress(const PromptProgress& p) override {
    std::string out = start();
    json data = {{"response", response_shell("in_progress", json::array())}, {"prompt_progress", progress_json(p)}};
    if (req_.timings_per_token) data["timings"] = timings_json(p);
    return out + event("response.in_progress", std::move(data));
  }

  std::string stream_error(const ApiError& e) override {
    std::string out = close();
    json failed = response_shell("failed", items_);
    failed["error"] = {{"code", e.code.empty() ? e.type : e.code}, {"message", e.message}};
    return out + event("response.failed", {{"response", failed}});
  }

 private:
  enum class Item { none, reasoning, message, call };

  std::string event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return std::string("event: ") + type + "\ndata: " + data.dump() + "\n\n";
  }

  static json text_part(const std::string& text) { return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}; }
  static json reasoning_part(const std::string& text) { return {{"type", "reasoning_text"}, {"text", text}}; }
  json reasoning_item(const std::string& text) const {
    json content = text.empty() ? json::array() : json::array({reasoning_part(text)});
    return {{"type", "reasoning"}, {"id", "rs_" + n_}, {"summary", json::array()}, {"content", content}};
  }
  json message_item(const std::string& text, const char* status) const {
    json content = std::string(status) == "in_progress" ? json::array() : json::array({text_part(text)});
    return {{"type", "message"}, {"id", "msg_" + n_}, {"status", status}, {"role", "assistant"}, {"content", content}};
  }
  // A call without an id of the model's gets one, the same streamed or not.
  json call_item(size_t i, const std::string& id, const std::string& name, const std::string& args, const char* status) const {
    const std::string tag = n_ + "_" + std::to_string(i);
    return {{"type", "function_call"}, {"id", "fc_" + tag}, {"call_id", id.empty() ? "call_" + tag : id},
            {"name", name},            {"arguments", args}, {"status", status}};
  }

  json response_shell(const char* status, const json& output) const {
    return {{"id", "resp_" + n_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"model", req_.model},
            {"output", output},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"usage", nullptr},
            {"max_output_tokens", req_.generate.max_tokens},
            {"previous_response_id", nullptr},
            {"store", false},
            {"parallel_tool_calls", req_.chat_input.parallel_tool_calls.value_or(true)},
            {"metadata", json::object()}};
  }
  json response(const GenerateResult& r, const json& output) const {
    json j = response_shell(incomplete(r.finish) ? "incomplete" : "completed", output);
    if (incomplete(r.finish)) j["incomplete_details"] = {{"reason", "max_output_tokens"}};
    j["usage"] = {{"input_tokens", r.timings.prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", r.timings.cached_tokens}}},
                  {"output_tokens", r.timings.generated_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", r.timings.prompt_tokens + r.timings.generated_tokens}};
    return j;
  }

  // response.created and response.in_progress, once.
  std::string start() {
    if (started_) return "";
    started_ = true;
    const json shell = response_shell("in_progress", json::array());
    // One statement each: the events are numbered as they are made.
    std::string out = event("response.created", {{"response", shell}});
    out += event("response.in_progress", {{"response", shell}});
    return out;
  }
  std::string open(Item kind, const json& item) {
    std::string out = close();
    open_ = kind;
    ++index_;
    item_id_ = item["id"];
    text_.clear();
    return out + event("response.output_item.added", {{"output_index", index_}, {"item", item}});
  }
  // The open item's .done events, and the item as it ended.
  std::string close() {
    std::string out;
    json item;
    switch (open_) {
      case Item::none: return "";
      case Item::reasoning:
        out += event("response.reasoning_text.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"text", text_}});
        out += event("response.content_part.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", reasoning_part(text_)}});
        item = reasoning_item(text_);
        break;
      case Item::message:
        out += event("response.output_text.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"text", text_}});
        out += event("response.content_part.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", text_part(text_)}});
        item = message_item(text_, "completed");
        break;
      case Item::call:
        out += event("response.function_call_arguments.done", {{"item_id", item_id_}, {"output_index", index_}, {"arguments", text_}});
        item = call_item(tool_, call_id_, call_name_, text_, "completed");
        break;
    }
    open_ = Item::none;
    items_.push_back(item);
    return out + event("response.output_item.done", {{"output_index", index_}, {"item", item}});
  }

  const CompletionRequest& req_;
  std::string n_;
  int64_t created_;
  int64_t seq_ = 0;
  bool started_ = false;
  Item open_ = Item::none;
  int index_ = -1;
  std::string item_id_, text_, call_id_, call_name_;
  size_t tool_ = std::string::npos;
  json items_ = json::array();
};

}  // namespace

std::unique_ptr<Answer> responses_answer(const CompletionRequest& req) { return std::make_unique<ResponsesAnswer>(req); }

}  // namespace reclaim::server
