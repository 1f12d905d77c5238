// OpenAI's Responses API over HTTP and through the official Node SDK:
// a response and its events, an agent's turn after a function call, and
// what this stateless server refuses. tests/responses_test.cpp checks the
// shapes with replies made by hand.
#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

TEST(ServeResponses, AResponseAndItsStreamAgree) {
  Served s({"-m", spm() + ":only"}, false);
  const json ask = {{"input", "Hello there"}, {"instructions", "Be brief."}, {"max_output_tokens", 6}, {"temperature", 0}};
  const json r = s.post_json("/v1/responses", ask);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["model"], "only");
  EXPECT_EQ(r["store"], false);
  EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u);
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "message");
  const std::string text = r["output"][0]["content"][0]["text"];
  EXPECT_TRUE(r["status"] == "incomplete" || r["status"] == "completed") << r.dump();
  EXPECT_GT(r["usage"]["input_tokens"].get<int>(), 3);

  json streamed = ask;
  streamed["stream"] = true;
  auto res = s.post("/responses", streamed);  // the path without /v1 too
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::string deltas;
  json last;
  int seq = 0;
  for (size_t at = res->body.find("data: "); at != std::string::npos; at = res->body.find("data: ", at + 6)) {
    const json d = json::parse(res->body.substr(at + 6, res->body.find("\n\n", at) - at - 6));
    EXPECT_EQ(d["sequence_number"], seq++) << d.dump();
    if (d["type"] == "response.output_text.delta") deltas += d["delta"].get<std::string>();
    last = d;
  }
  EXPECT_EQ(deltas, text);
  EXPECT_EQ(last["type"], r["status"] == "completed" ? "response.completed" : "response.incomplete") << last.dump();
  EXPECT_EQ(last["response"]["usage"]["input_tokens"], r["usage"]["input_tokens"]);
  expect_error(s.post("/v1/responses", {{"input", "Hi"}, {"previous_response_id", "resp_1"}}), 400, "keeps no responses");
  expect_error(s.post("/v1/responses", {{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}), 400,
               "image_url' must be a string");
  expect_error(s.post("/v1/responses", {{"input", {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}}}), 400, "text only");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

TEST(ServeResponses, TheOfficialOpenAINodeSdkCreatesStreamsAndTakesAFunctionCallsOutput) {
  const std::string sdk = RECLAIM_OPENAI_SDK;
  ASSERT_FALSE(sdk.empty()) << "built without RECLAIM_OPENAI_SDK: run scripts/setup, which fetches the SDK";
  Served s({"-m", bpe() + ":bpe"}, false);
  int status = 0;
  const std::string out = run_sdk_script(RECLAIM_SDK_RESPONSES_SCRIPT, sdk, s.port(), "bpe", status);
  ASSERT_EQ(status, 0) << out;
  const json got = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(got["create"]["object"], "response") << out;
  EXPECT_EQ(got["create"]["items"], json::array({"message"})) << out;
  EXPECT_FALSE(got["create"]["text"].get<std::string>().empty()) << out;
  // Greedy: the stream says what the response said, and the SDK reads both.
  EXPECT_EQ(got["stream"]["first"], "response.created") << out;
  EXPECT_EQ(got["stream"]["deltas"], got["create"]["text"]) << out;
  EXPECT_EQ(got["stream"]["text"], got["create"]["text"]) << out;
  EXPECT_EQ(got["stream"]["status"], got["create"]["status"]) << out;
  // The call and its output are in the prompt (qwen2's template renders them without the tools).
  EXPECT_GT(got["turn"]["input_tokens"].get<int>(), got["create"]["usage"]["input_tokens"].get<int>()) << out;
  EXPECT_EQ(got["previous"]["status"], 400) << out;
  EXPECT_EQ(got["previous"]["param"], "previous_response_id") << out;
  s.post("/v1/models/unload", {{"model", "bpe"}});
  s.expect_clean();
}
