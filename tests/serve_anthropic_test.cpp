// Anthropic's Messages API over HTTP, as its clients call it: the key as
// X-Api-Key, a message or its event stream, count_tokens, an agent's
// transcript with tool calls and their results, and errors in Anthropic's
// shape. tests/anthropic_test.cpp checks the shapes with replies made by hand.
#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

const json kBody = {{"max_tokens", 6},
                    {"temperature", 0},
                    {"system", "Be brief."},
                    {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hello there"}}}}}}}};

void expect_anthropic_error(const httplib::Result& r, int status, const std::string& type, const std::string& says) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const json j = json::parse(r->body, nullptr, false);
  EXPECT_EQ(j["type"], "error") << r->body;
  EXPECT_EQ(j["error"]["type"], type) << r->body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(says), std::string::npos) << r->body;
}

}  // namespace

TEST(ServeAnthropic, AMessageItsStreamAndItsCountAgree) {
  Served s({"-m", spm() + ":only", "--api-key", "sk-ant"}, false);
  s.http().set_default_headers({{"x-api-key", "sk-ant"}, {"anthropic-version", "2023-06-01"}});
  const json m = s.post_json("/v1/messages", kBody);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "only");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_EQ(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "text");
  const std::string whole = m["content"][0]["text"];
  EXPECT_LE(m["usage"]["output_tokens"].get<int>(), 6);
  EXPECT_TRUE(m["stop_reason"] == "max_tokens" || m["stop_reason"] == "end_turn") << m.dump();
  // count_tokens counts what the message's prompt was.
  json count_body = kBody;
  count_body.erase("max_tokens");
  // Anthropic's usage counts apart what the cache held: the two make the
  // prompt.
  const int prompt = m["usage"]["input_tokens"].get<int>() + m["usage"]["cache_read_input_tokens"].get<int>();
  EXPECT_EQ(m["usage"]["cache_creation_input_tokens"], 0);
  EXPECT_EQ(s.post_json("/v1/messages/count_tokens", count_body)["input_tokens"], prompt);

  // Streamed, greedy: the same text, in Anthropic's events.
  json streamed = kBody;
  streamed["stream"] = true;
  auto r = s.post("/v1/messages", streamed);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  std::vector<std::string> names;
  std::string text;
  json start, stop;
  for (size_t at = r->body.find("event: "); at != std::string::npos; at = r->body.find("event: ", at + 1)) {
    const size_t nl = r->body.find('\n', at);
    names.push_back(r->body.substr(at + 7, nl - at - 7));
    const size_t data = r->body.find("data: ", nl);
    const json d = json::parse(r->body.substr(data + 6, r->body.find("\n\n", data) - data - 6));
    if (d["type"] == "content_block_delta") text += d["delta"]["text"].get<std::string>();
    if (d["type"] == "message_start") start = d;
    if (d["type"] == "message_delta") stop = d;
  }
  ASSERT_GE(names.size(), 5u) << r->body;
  EXPECT_EQ(names.front(), "message_start");
  EXPECT_EQ(names[1], "content_block_start");
  EXPECT_EQ(names[names.size() - 3], "content_block_stop");
  EXPECT_EQ(names.back(), "message_stop");
  EXPECT_EQ(text, whole);
  // message_start is sent before the cache is looked at: the whole prompt;
  // message_delta says what the cache held. The same prompt again: all but
  // the last token of it from the cache.
  EXPECT_EQ(start["message"]["usage"]["input_tokens"], prompt);
  EXPECT_EQ(stop["delta"]["stop_reason"], m["stop_reason"]);
  EXPECT_EQ(stop["usage"]["output_tokens"], m["usage"]["output_tokens"]);
  EXPECT_EQ(stop["usage"]["input_tokens"].get<int>() + stop["usage"]["cache_read_input_tokens"].get<int>(), prompt);
  EXPECT_GT(stop["usage"]["cache_read_input_tokens"].get<int>(), 0) << stop.dump();

  // Errors are Anthropic's.
  json no_max = kBody;
  no_max.erase("max_tokens");
  expect_anthropic_error(s.post("/v1/messages", no_max), 400, "invalid_request_error", "'max_tokens' is required");
  json image = kBody;
  image["messages"][0]["content"] = {{{"type", "image"}, {"source", {{"type", "base64"}}}}};
  expect_anthropic_error(s.post("/v1/messages", image), 400, "invalid_request_error", "source.data");
  // Refused before routing, still in Anthropic's shape: a wrong key, a body
  // over the limit.
  expect_anthropic_error(s.post("/v1/messages", kBody, {{"x-api-key", "sk-wrong"}}), 401, "authentication_error", "API key");
  const std::string huge(33u << 20, ' ');
  expect_anthropic_error(s.http().Post("/v1/messages", huge, "application/json"), 413, "request_too_large", "larger");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

// An agent's turn after a tool ran: its call and the result are in the
// prompt the model's template makes (one with tool calls, Qwen 2.5's).
TEST(ServeAnthropic, AnAgentsToolTranscriptIsRenderedAndAnswered) {
  const std::string qwen = temp_path("anthropic-qwen.gguf");
  const Result made =
      run("make-test-model --out " + qwen + " --vocab bpe --embd 64 --layers 1 --type q8_0 --chat-template Qwen-Qwen2.5-7B-Instruct");
  ASSERT_EQ(made.status, 0) << made.err;
  Served s({"-m", qwen + ":qwen"}, false);
  const json schema = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}};
  const json tools = json::array({{{"name", "get_weather"}, {"description", "Current weather of a city"}, {"input_schema", schema}}});
  const json messages = {
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", {{{"type", "tool_use"}, {"id", "toolu_01"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
      {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_01"}, {"content", "18 degrees and sunny"}}}}}};
  const json body = {{"max_tokens", 4}, {"temperature", 0}, {"tools", tools}, {"messages", messages}};
  const json m = s.post_json("/v1/messages", body);
  EXPECT_EQ(m["type"], "message") << m.dump();
  // The prompt holds the call and its result: more tokens than without them.
  json fewer = body;
  fewer.erase("max_tokens");
  const int with = s.post_json("/v1/messages/count_tokens", fewer)["input_tokens"];
  fewer["messages"] = json::array({messages[0]});
  EXPECT_GT(with, s.post_json("/v1/messages/count_tokens", fewer)["input_tokens"].get<int>() + 10);
  EXPECT_EQ(with, m["usage"]["input_tokens"].get<int>() + m["usage"]["cache_read_input_tokens"].get<int>());
  s.post("/v1/models/unload", {{"model", "qwen"}});
  s.expect_clean();
}

// The official SDK (@anthropic-ai/sdk), as an agent uses it: create, its
// stream as the SDK accumulates it, count_tokens, the turn after a tool ran.
TEST(ServeAnthropic, TheOfficialSdkCreatesStreamsCountsAndTakesAToolsResult) {
  const std::string sdk = RECLAIM_ANTHROPIC_SDK;
  ASSERT_FALSE(sdk.empty()) << "built without RECLAIM_ANTHROPIC_SDK: run scripts/setup, which fetches the SDK";
  const std::string qwen = temp_path("anthropic-sdk-qwen.gguf");
  const Result made =
      run("make-test-model --out " + qwen + " --vocab bpe --embd 64 --layers 1 --type q8_0 --chat-template Qwen-Qwen2.5-7B-Instruct");
  ASSERT_EQ(made.status, 0) << made.err;
  Served s({"-m", spm() + ":chat", "-m", qwen + ":qwen", "--api-key", "sk-ant-test"}, false);
  s.http().set_default_headers({{"x-api-key", "sk-ant-test"}});
  int status = 0;
  const std::string out = run_node_script(RECLAIM_ANTHROPIC_SCRIPT,
                                          sdk + " http://127.0.0.1:" + std::to_string(s.port()) + " chat qwen", status);
  ASSERT_EQ(status, 0) << out;
  const json got = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(got["create"]["type"], "message") << out;
  EXPECT_EQ(got["create"]["role"], "assistant") << out;
  EXPECT_EQ(got["create"]["model"], "chat") << out;
  EXPECT_FALSE(got["create"]["text"].get<std::string>().empty()) << out;
  // Greedy: the stream says what the message said, in the SDK's reading too.
  EXPECT_EQ(got["stream"]["first"], "message_start") << out;
  EXPECT_EQ(got["stream"]["last"], "message_stop") << out;
  EXPECT_EQ(got["stream"]["deltas"], got["create"]["text"]) << out;
  EXPECT_EQ(got["stream"]["text"], got["create"]["text"]) << out;
  EXPECT_EQ(got["stream"]["stop_reason"], got["create"]["stop_reason"]) << out;
  EXPECT_EQ(got["stream"]["usage"]["output_tokens"], got["create"]["usage"]["output_tokens"]) << out;
  EXPECT_EQ(got["count"]["input_tokens"].get<int>(), got["create"]["usage"]["input_tokens"].get<int>() +
                                                    got["create"]["usage"]["cache_read_input_tokens"].get<int>())
      << out;
  // The call and its result are in the turn's prompt, which count_tokens counts.
  EXPECT_EQ(got["tool"]["type"], "message") << out;
  EXPECT_EQ(got["tool"]["input_tokens"], got["tool"]["counted"]) << out;
  EXPECT_GT(got["tool"]["counted"].get<int>(), got["tool"]["question_only"].get<int>() + 10) << out;
  EXPECT_EQ(got["refused"]["status"], 400) << out;
  EXPECT_EQ(got["refused"]["type"], "invalid_request_error") << out;
  for (const char* m : {"chat", "qwen"}) s.post("/v1/models/unload", {{"model", m}});
  s.expect_clean();
}
