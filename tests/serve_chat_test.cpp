// The chat surface as clients use it: agents' transcripts (null content with
// tool calls, text parts), a JSON schema the reply follows, a model without a
// template, and a 400 that names the field for each mistake.
#include <httplib.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"parameters",
             {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", json::array({"city"})}}}}}};
}

// The content of a streamed chat: its deltas joined, and its finish reason.
std::pair<std::string, std::string> streamed_content(Served& s, json body) {
  body["stream"] = true;
  auto r = s.post("/v1/chat/completions", body);
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  std::string content, finish;
  for (size_t at = r->body.find("data: "); at != std::string::npos; at = r->body.find("data: ", at + 6)) {
    const size_t end = r->body.find("\n\n", at);
    const std::string data = r->body.substr(at + 6, end - at - 6);
    if (data == "[DONE]") break;
    const json chunk = json::parse(data);
    EXPECT_FALSE(chunk.contains("error")) << data;
    const json& c = chunk["choices"][0];
    if (c["delta"].contains("content") && c["delta"]["content"].is_string()) content += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  return {content, finish};
}

}  // namespace

TEST(ServeChat, AnAgentsTranscriptIsTaken) {
  Served s;
  const json messages = json::array(
      {{{"role", "developer"}, {"content", "Answer briefly."}},
       {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Weather "}}, {{"type", "text"}, {"text", "in Paris?"}}})}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls",
         json::array({{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 degrees"}}});
  for (const char* m : {"spm", "bpe"}) {
    const json reply =
        s.post_json("/v1/chat/completions", {{"model", m}, {"messages", messages}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant") << reply.dump();
    EXPECT_TRUE(reply["choices"][0]["message"]["content"].is_string()) << reply.dump();
    EXPECT_GT(reply["usage"]["prompt_tokens"].get<int>(), 10) << reply.dump();
    // An agent sends its tools with every turn: a template without tool
    // calls answers in text, with the same prompt (the tools cannot be
    // shown), streamed or not; a call it cannot make is refused.
    const json with_tools = {{"model", m}, {"messages", messages}, {"max_tokens", 4}, {"temperature", 0},
                             {"tools", json::array({weather_tool()})}, {"tool_choice", "auto"}};
    const json answered = s.post_json("/v1/chat/completions", with_tools);
    EXPECT_EQ(answered["choices"][0]["message"]["content"], reply["choices"][0]["message"]["content"]) << answered.dump();
    EXPECT_EQ(answered["usage"]["prompt_tokens"], reply["usage"]["prompt_tokens"]) << answered.dump();
    EXPECT_EQ(streamed_content(s, with_tools).first, reply["choices"][0]["message"]["content"]);
    json required = with_tools;
    required["tool_choice"] = "required";
    expect_error(s.post("/v1/chat/completions", required), 400, "cannot be required");
  }
  s.expect_clean();
}

TEST(ServeChat, EachMistakeIsA400NamingItsField) {
  Served s;
  struct Case {
    json change;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}})}}})}},
       "messages[0].content[0].image_url.url"},
      {{{"messages", json::array({{{"role", "robot"}, {"content", "x"}}})}}, "messages[0].role"},
      {{{"messages", json::array({{{"role", "user"}, {"content", nullptr}}})}}, "messages[0].content"},
      {{{"tools", json::array({weather_tool()})}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}},
       "tool_choice"},
      // qwen2's template has no tool calls: a call cannot be required.
      {{{"tools", json::array({weather_tool()})}, {"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", json::array({{{"type", "function"}, {"function", {{"name", 3}}}}})}}, "tools[0].function.name"},
      {{{"logit_bias", {{"99999999", 5}}}}, "logit_bias"},
      {{{"logit_bias", {{"12", 500}}}}, "logit_bias"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format.type"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "no-such-type"}}}}}}}}, "response_format"},
      {{{"grammar", "root ::= ("}}, "grammar"},
      {{{"n", 9}}, "n"},
      {{{"frequency_penalty", 3}}, "frequency_penalty"},
      {{{"presence_penalty", "high"}}, "presence_penalty"},
      {{{"parallel_tool_calls", "yes"}}, "parallel_tool_calls"},
  };
  for (const Case& c : cases) {
    json body = {{"model", "bpe"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}};
    for (const auto& [k, v] : c.change.items()) body[k] = v;
    auto r = s.post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << c.param << ": " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    EXPECT_EQ(e["error"]["param"], c.param) << r->body;
  }
  // A schema is refused before its model is held: nothing loads for it.
  expect_error(s.post("/v1/completions", {{"model", "spm"},
                                          {"prompt", "x"},
                                          {"response_format", {{"type", "json_schema"},
                                                               {"json_schema", {{"schema", {{"type", "no-such-type"}}}}}}}}),
               400, "makes no grammar");
  EXPECT_EQ(s.model("spm")["state"], "unloaded");
  // Unknown fields are ignored, as OpenAI does.
  s.post_json("/v1/chat/completions",
              {{"model", "bpe"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}, {"no_such_field", 1}});
  s.expect_clean();
}

TEST(ServeChat, AJsonSchemaReplyIsThatJsonStreamedOrNot) {
  Served s({"--ctx", "1024"});
  const json body = {{"model", "bpe"},
                     {"messages", json::array({user("A number as JSON.")})},
                     {"max_tokens", 900},
                     {"temperature", 0},
                     {"response_format",
                      {{"type", "json_schema"},
                       {"json_schema",
                        {{"name", "n"},
                         {"strict", true},
                         {"schema",
                          {{"type", "object"},
                           {"properties", {{"n", {{"type", "integer"}}}}},
                           {"required", json::array({"n"})},
                           {"additionalProperties", false}}}}}}}};
  const json reply = s.post_json("/v1/chat/completions", body);
  ASSERT_EQ(reply["choices"][0]["finish_reason"], "stop") << reply.dump();
  const std::string content = reply["choices"][0]["message"]["content"];
  const json got = json::parse(content, nullptr, false);
  ASSERT_TRUE(got.is_object()) << content;
  EXPECT_TRUE(got["n"].is_number_integer()) << content;
  EXPECT_EQ(streamed_content(s, body), std::make_pair(content, std::string("stop")));
  // json_object on /v1/completions too.
  const json plain = s.post_json("/v1/completions", {{"model", "bpe"},
                                                      {"prompt", "JSON:"},
                                                      {"max_tokens", 900},
                                                      {"temperature", 0},
                                                      {"response_format", {{"type", "json_object"}}}});
  ASSERT_EQ(plain["choices"][0]["finish_reason"], "stop") << plain.dump();
  EXPECT_TRUE(json::parse(plain["choices"][0]["text"].get<std::string>(), nullptr, false).is_object()) << plain.dump();
  s.expect_clean();
}

TEST(ServeChat, AModelWithoutATemplateChatsInChatmlAndTheLogSaysSoOnce) {
  Served s;
  const json body = {{"model", "spm"}, {"messages", json::array({user("hi")})}, {"max_tokens", 3}, {"temperature", 0}};
  // Once for the prompt cache, so that the replies compared below are each
  // decoded the same way (engine/parity.h).
  s.post_json("/v1/chat/completions", body);
  const json a = s.post_json("/v1/chat/completions", body);
  const json b = s.post_json("/v1/chat/completions", body);
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  EXPECT_EQ(streamed_content(s, body).first, a["choices"][0]["message"]["content"]);
  EXPECT_TRUE(s.logged("model 'spm' has no chat template: chats with it use chatml"));
  s.expect_clean();
  const std::string err = s.stop().err;
  const std::string line = "has no chat template";
  EXPECT_EQ(err.find(line), err.rfind(line)) << err;
}

// A template that does not parse is the model file's defect: a 422 that
// says so, and the other models chat on.
TEST(ServeChat, AModelWhoseTemplateDoesNotParseIsA422AndTheOthersChatOn) {
  const std::string tmpl = reclaim::testing::temp_path("broken-template.jinja");
  std::ofstream(tmpl) << "{% for m in messages %}{{ m.content }";
  const std::string path = reclaim::testing::temp_path("broken-template.gguf");
  const Result made = run("make-test-model --out " + path + " --vocab bpe --embd 64 --layers 1 --type q8_0 --chat-template " + tmpl);
  ASSERT_EQ(made.status, 0) << made.out << made.err;
  Served s({"-m", path + ":broken"});
  const json good = {{"model", "bpe"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}, {"temperature", 0}};
  EXPECT_EQ(s.post("/v1/chat/completions", good)->status, 200);
  json bad = good;
  bad["model"] = "broken";
  auto r = s.post("/v1/chat/completions", bad);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422) << r->body;
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "invalid_model_file") << r->body;
  EXPECT_NE(e["message"].get<std::string>().find("does not parse"), std::string::npos) << r->body;
  EXPECT_EQ(s.post("/v1/chat/completions", good)->status, 200);
  s.post("/v1/models/unload", {{"model", "broken"}});
  s.expect_clean();
}

TEST(ServeChat, LogprobsComeInOpenAIsShapesStreamedOrNot) {
  Served s;
  const json body = {{"model", "bpe"},
                     {"messages", json::array({user("hello")})},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", 2}};
  const json reply = s.post_json("/v1/chat/completions", body);
  const json& content = reply["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), reply["usage"]["completion_tokens"].get<size_t>()) << reply.dump();
  std::string bytes;
  for (const json& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);  // greedy: the likeliest
    for (const json& b : e["bytes"]) bytes += static_cast<char>(b.get<int>());
  }
  EXPECT_EQ(bytes, reply["choices"][0]["message"]["content"].get<std::string>());

  // Streamed: the same entries, spread over the chunks.
  json sbody = body;
  sbody["stream"] = true;
  auto r = s.post("/v1/chat/completions", sbody);
  ASSERT_TRUE(r);
  json all = json::array();
  for (size_t at = r->body.find("data: {"); at != std::string::npos; at = r->body.find("data: {", at + 6)) {
    const json chunk = json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6));
    const json& lp = chunk["choices"][0]["logprobs"];
    if (lp.is_object()) {
      for (const json& e : lp["content"]) all.push_back(e);
    }
  }
  EXPECT_EQ(all, content);

  // The legacy completions shape.
  const json plain =
      s.post_json("/v1/completions", {{"model", "bpe"}, {"prompt", "Once"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 1}});
  const json& lp = plain["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u) << plain.dump();
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 1; i < 6; ++i) EXPECT_GE(lp["text_offset"][i].get<int>(), lp["text_offset"][i - 1].get<int>());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);
  expect_error(s.post("/v1/chat/completions", {{"model", "bpe"}, {"messages", json::array({user("x")})}, {"top_logprobs", 2}}), 400,
               "needs 'logprobs': true");
  expect_error(s.post("/v1/chat/completions",
                      {{"model", "bpe"}, {"messages", json::array({user("x")})}, {"logprobs", true}, {"top_logprobs", 21}}),
               400, "top_logprobs");
  s.expect_clean();
}

TEST(ServeChat, TheOfficialOpenAINodeSdkGetsEmbeddingsJsonLogprobsAndReplaysATool) {
  const std::string sdk = RECLAIM_OPENAI_SDK;
  ASSERT_FALSE(sdk.empty()) << "built without RECLAIM_OPENAI_SDK: run scripts/setup, which fetches the SDK";
  Served s({"--ctx", "1024"});
  int status = 0;
  const std::string out = run_sdk_script(RECLAIM_SDK_API_SCRIPT, sdk, s.port(), "bpe", status);
  ASSERT_EQ(status, 0) << out;
  const json got = json::parse(out.substr(out.find('{')));
  // Embeddings: the SDK asks for base64 and decodes it itself.
  ASSERT_EQ(got["embeddings"].size(), 2u) << out;
  for (const json& e : got["embeddings"]) {
    EXPECT_EQ(e["length"], 64);
    EXPECT_NEAR(e["norm"].get<double>(), 1.0, 1e-4);
  }
  EXPECT_EQ(got["structured"]["finish"], "stop") << out;
  const json n = json::parse(got["structured"]["content"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(n.is_object() && n["n"].is_number_integer()) << out;
  EXPECT_EQ(got["logprobs"]["entries"], got["logprobs"]["tokens"]) << out;
  EXPECT_EQ(got["logprobs"]["top"], true) << out;
  EXPECT_EQ(got["replay"]["content"], "string") << out;
  EXPECT_EQ(got["image"]["status"], 400) << out;
  EXPECT_EQ(got["image"]["param"], "messages[0].content[0].image_url.url") << out;
  s.expect_clean();
}

// The grammar sampler and the logprobs a request holds go with it when its
// client leaves mid-stream.
TEST(ServeChat, AClientThatLeavesAConstrainedStreamLeavesNothing) {
  Served s({"--ctx", "1024"});
  // A grammar that never completes: the reply runs to max_tokens unless cut.
  leave_after_first_chunk(s.port(), {{"model", "bpe"},
                                     {"messages", json::array({user("a's")})},
                                     {"stream", true},
                                     {"max_tokens", 900},
                                     {"temperature", 0},
                                     {"grammar", "root ::= \"a\" root"},
                                     {"logprobs", true},
                                     {"top_logprobs", 5}});
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 0; }));
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("reclaim_requests_total{outcome=\"client_gone\"} 1\n"), std::string::npos) << m->body;
  s.expect_clean();
}

// llama-server's post_sampling_probs: the probabilities the sampler chain
// drew from, after top-k and the rest; never one of 0, at most top_k of
// them, and certain where the chain leaves one candidate.
TEST(ServeChat, PostSamplingProbabilitiesAreTheChainsOwn) {
  Served s({"-m", spm() + ":only"}, false);
  const json body = {{"prompt", "Once upon a time"}, {"n_predict", 6},   {"n_probs", 5},
                     {"temperature", 1.0},          {"top_k", 3},        {"post_sampling_probs", true},
                     {"seed", 7}};
  const json r = s.post_json("/completion", body);
  const json& probs = r["completion_probabilities"];
  ASSERT_EQ(probs.size(), 6u) << r.dump();
  for (const json& e : probs) {
    ASSERT_TRUE(e.contains("prob") && !e.contains("logprob")) << e.dump();
    EXPECT_GT(e["prob"].get<double>(), 0.0);
    EXPECT_LE(e["prob"].get<double>(), 1.0);
    const json& top = e["top_probs"];
    ASSERT_GE(top.size(), 1u);
    ASSERT_LE(top.size(), 3u) << e.dump();  // top_k's three, though five were asked for
    double sum = 0;
    bool drawn_among = false;
    for (const json& t : top) {
      EXPECT_GT(t["prob"].get<double>(), 0.0);
      sum += t["prob"].get<double>();
      drawn_among |= t["id"] == e["id"];
    }
    EXPECT_TRUE(drawn_among) << e.dump();
    EXPECT_NEAR(sum, 1.0, 1e-4) << e.dump();  // the chain's candidates are all of its draw
    for (size_t i = 1; i < top.size(); ++i) EXPECT_GE(top[i - 1]["prob"].get<double>(), top[i]["prob"].get<double>());
  }
  // One candidate (top_k 1), and greedy: each token certain.
  for (const json& fields : {json{{"top_k", 1}}, json{{"temperature", 0}}}) {
    json one = body;
    one.merge_patch(fields);
    for (const json& e : s.post_json("/completion", one)["completion_probabilities"]) {
      EXPECT_DOUBLE_EQ(e["prob"].get<double>(), 1.0) << fields.dump();
      ASSERT_EQ(e["top_probs"].size(), 1u) << fields.dump();
      EXPECT_EQ(e["top_probs"][0]["id"], e["id"]);
    }
  }
  // Without it, the model's own log-probabilities, as before.
  json model_probs = body;
  model_probs.erase("post_sampling_probs");
  const json m = s.post_json("/completion", model_probs)["completion_probabilities"];
  ASSERT_FALSE(m.empty());
  EXPECT_TRUE(m[0].contains("logprob") && m[0]["top_logprobs"].size() == 5u) << m[0].dump();
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

// llama-server's stream of n_probs: one token's probabilities a chunk, also
// for tokens whose text comes out together (a character's bytes split over
// tokens): those get a chunk each, the text riding with the last.
TEST(ServeChat, ANativeStreamCarriesOneTokensProbabilitiesAChunk) {
  Served s({"-m", bpe() + ":only"}, false);
  int held = 0;  // chunks of a token whose text waited for the next one's
  for (int seed : {1, 2, 3}) {
    const json body = {{"prompt", "Once upon"}, {"n_predict", 64}, {"n_probs", 2},
                       {"temperature", 1},      {"seed", seed},   {"stream", true}};
    auto r = s.post("/completion", body);
    ASSERT_TRUE(r && r->status == 200);
    std::string text;
    int chunks = 0, predicted = -1;
    for (size_t at = r->body.find("data: {"); at != std::string::npos; at = r->body.find("data: {", at + 6)) {
      const json c = json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6));
      if (c["stop"] == true) {
        predicted = c["tokens_predicted"];
        continue;
      }
      ++chunks;
      ASSERT_EQ(c["completion_probabilities"].size(), 1u) << c.dump();
      held += c["content"] == "";
      text += c["content"].get<std::string>();
    }
    EXPECT_EQ(chunks, predicted) << seed;
    json whole = body;
    whole["stream"] = false;
    EXPECT_EQ(text, s.post_json("/completion", whole)["content"].get<std::string>()) << seed;
  }
  EXPECT_GT(held, 0);  // the case was there to split
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}
