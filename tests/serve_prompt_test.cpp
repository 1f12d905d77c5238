// What a request puts in front of its model, shown to a client that asks:
// llama-server's "verbose" (the reply carries the prompt as the model read
// it), the input token counts, and templates rendered without Jinja
// (llama-server's --no-jinja), whose JSON schema is the whole grammar.
#include <httplib.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

const json kUser = {{"role", "user"}, {"content", "What is the best book"}};

json with_fields(json body, const json& fields) {
  body.merge_patch(fields);
  return body;
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

// The data events of a server-sent-event stream, parsed.
std::vector<json> events(const std::string& body) {
  std::vector<json> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    if (data != "[DONE]") out.push_back(json::parse(data));
    at = end;
  }
  return out;
}

}  // namespace

TEST(ServePrompt, AVerboseReplyCarriesThePromptAsTheModelReadIt) {
  Served s({"-m", bpe() + ":chatml"}, false);  // Qwen2's vocabulary and ChatML template
  const json chat = {{"messages", {kUser}}, {"max_tokens", 3}, {"temperature", 0}};
  const std::string rendered = s.post_json("/apply-template", chat)["prompt"];
  const json r = s.post_json("/v1/chat/completions", with_fields(chat, {{"verbose", true}}));
  ASSERT_TRUE(r.contains("__verbose")) << r.dump();
  const json& v = r["__verbose"];
  // The prompt's tokens as text: the template's rendering, token for token.
  EXPECT_EQ(v["prompt"], rendered);
  EXPECT_EQ(v["tokens_evaluated"], r["usage"]["prompt_tokens"]);
  EXPECT_EQ(v["tokens_predicted"], 3);
  EXPECT_EQ(v["generation_settings"]["n_predict"], 3);
  EXPECT_FALSE(s.post_json("/v1/chat/completions", with_fields(chat, {{"verbose", false}})).contains("__verbose"));
  EXPECT_FALSE(s.post_json("/v1/chat/completions", chat).contains("__verbose"));
  // Streamed, on the finishing chunk.
  auto streamed = s.post("/v1/chat/completions", with_fields(chat, {{"verbose", true}, {"stream", true}}));
  ASSERT_TRUE(streamed && streamed->status == 200);
  const std::vector<json> chunks = events(streamed->body);
  ASSERT_FALSE(chunks.empty());
  int with_verbose = 0;
  for (const json& c : chunks) {
    if (!c.contains("__verbose")) continue;
    ++with_verbose;
    EXPECT_EQ(c["__verbose"]["prompt"], rendered);
    EXPECT_FALSE(c["choices"][0]["finish_reason"].is_null()) << c.dump();
  }
  EXPECT_EQ(with_verbose, 1) << streamed->body;
  // A completion's: its prompt as the model read it.
  const json c = s.post_json("/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 2}, {"verbose", true}});
  EXPECT_EQ(c["__verbose"]["prompt"], "Once upon") << c.dump();
  expect_error(s.post("/v1/chat/completions", with_fields(chat, {{"verbose", "yes"}})), 400, "'verbose'");
  s.post("/v1/models/unload", {{"model", "chatml"}});
  s.expect_clean();
}

TEST(ServePrompt, TheInputTokenCountIsTheRequestsOwnPromptCount) {
  Served s({"-m", bpe() + ":chatml"}, false);
  const json chat = {{"messages", {{{"role", "system"}, {"content", "Book"}}, kUser}}};
  const json answered = s.post_json("/v1/chat/completions", with_fields(chat, {{"max_tokens", 1}}));
  const int64_t prompt_tokens = answered["usage"]["prompt_tokens"];
  for (const char* path : {"/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"}) {
    EXPECT_EQ(s.post_json(path, chat)["input_tokens"], prompt_tokens) << path;
  }
  // A response's body: its instructions are the system message.
  const json response = {{"instructions", "Book"}, {"input", "What is the best book"}};
  for (const char* path : {"/v1/responses/input_tokens", "/responses/input_tokens"}) {
    const json n = s.post_json(path, response);
    EXPECT_EQ(n["object"], "response.input_tokens") << path;
    EXPECT_EQ(n["input_tokens"], prompt_tokens) << path;
  }
  expect_error(s.post("/v1/chat/completions/input_tokens", {{"messages", "hello"}}), 400, "messages");
  expect_error(s.post("/v1/responses/input_tokens", {{"input", 42}}), 400, "input");
  s.post("/v1/models/unload", {{"model", "chatml"}});
  s.expect_clean();
}

// Without Jinja, the template is llama.cpp's built-in one that its text is
// like (Qwen2's Jinja ChatML is ChatML), tools cannot be offered, and a JSON
// schema is the grammar of the whole reply: `"42"` is all it can be.
TEST(ServePrompt, WithoutJinjaTheBuiltInTemplateRendersAndTheSchemaIsTheWholeReply) {
  const std::string path = write_config("no-jinja.toml",
                                        "[models.plain]\n"
                                        "path = \"" + bpe() + "\"\n"
                                        "jinja = false\n"
                                        "[models.odd]\n"
                                        "path = \"" + bpe() + "\"\n"
                                        "jinja = false\n"
                                        "chat_template = \"{% for m in messages %}{{ m.content }}{% endfor %}\"\n");
  Served s({"--config", path}, false);
  const json chat = {{"model", "plain"}, {"messages", {kUser}}};
  EXPECT_EQ(s.post_json("/apply-template", chat)["prompt"],
            "<|im_start|>user\nWhat is the best book<|im_end|>\n<|im_start|>assistant\n");
  const json r = s.post_json("/v1/chat/completions",
                             with_fields(chat, {{"max_tokens", 8},
                                                {"response_format", {{"type", "json_object"}, {"schema", {{"const", "42"}}}}}}));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "\"42\"") << r.dump();
  const json tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}};
  expect_error(s.post("/v1/chat/completions", with_fields(chat, {{"tools", {tool}}, {"tool_choice", "required"}})), 400,
               "built-in");
  expect_error(s.post("/v1/chat/completions", with_fields(chat, {{"response_format", {{"type", "json_object"}, {"schema", 1}}}})),
               400, "response_format.schema");
  // A template the built-in engine does not know is the model's defect.
  auto odd = s.post("/v1/chat/completions", {{"model", "odd"}, {"messages", {kUser}}, {"max_tokens", 1}});
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->status, 422) << odd->body;
  EXPECT_NE(odd->body.find("built-in templates"), std::string::npos) << odd->body;
  for (const char* m : {"plain", "odd"}) s.post("/v1/models/unload", {{"model", m}});
  s.expect_clean();
}

// llama-server's prompt as an object, {"prompt_string", "multimodal_data"}:
// the text is the prompt; media, which no model here can read, a 400.
TEST(ServePrompt, APromptObjectIsItsTextAndItsMediaAreRefused) {
  Served s({"-m", spm() + ":only"}, false);
  const json plain = s.post_json("/completion", {{"prompt", "Once"}, {"n_predict", 2}, {"temperature", 0}});
  const json object = s.post_json("/completion", {{"prompt", {{"prompt_string", "Once"}}}, {"n_predict", 2}, {"temperature", 0}});
  EXPECT_EQ(object["content"], plain["content"]);
  EXPECT_EQ(object["tokens_evaluated"], plain["tokens_evaluated"]);
  expect_error(s.post("/completion", {{"prompt", {{"prompt_string", "Once <__media__>"}, {"multimodal_data", {"iVBORw0KGgo="}}}}}),
               400, "prompt.multimodal_data");
  expect_error(s.post("/completion", {{"prompt", {{"text", "Once"}}}}), 400, "prompt_string");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

// llama-server's return_progress: a stream reports its prompt's decode, once
// as it gets its sequence (what the cache gave) and after each batch;
// timings_per_token: each chunk carries the timings so far.
TEST(ServePrompt, AStreamReportsItsPromptBatchByBatch) {
  Served s({"-m", spm() + ":only", "--batch", "16"}, false);
  std::string words;
  for (int i = 0; i < 12; ++i) words += "the quick brown fox ";
  const json body = {{"prompt", words},          {"n_predict", 3},           {"stream", true},
                     {"return_progress", true}, {"timings_per_token", true}, {"temperature", 0}};
  auto progress_of = [&](const json& b) {
    auto r = s.post("/completion", b);
    EXPECT_TRUE(r && r->status == 200);
    std::vector<json> reports, texts;
    for (const json& e : events(r ? r->body : "")) {
      if (e.contains("prompt_progress")) {
        reports.push_back(e);
      } else if (!e["content"].get<std::string>().empty()) {
        texts.push_back(e);
      }
    }
    return std::make_pair(reports, texts);
  };
  const auto [reports, texts] = progress_of(body);
  ASSERT_GE(reports.size(), 2u);
  const json& first = reports.front()["prompt_progress"];
  const int total = first["total"];
  EXPECT_EQ(first["cache"], 0);
  EXPECT_EQ(first["processed"], 0);
  EXPECT_EQ(reports.front()["timings"]["prompt_n"], 0);
  EXPECT_EQ(reports.front()["timings"]["prompt_ms"], 0.0);
  // One report a batch of at most 16, the last with the whole prompt.
  EXPECT_EQ(reports.size(), 1u + static_cast<size_t>((total + 15) / 16)) << total;
  for (size_t i = 1; i < reports.size(); ++i) {
    const json& p = reports[i]["prompt_progress"];
    const json& before = reports[i - 1]["prompt_progress"];
    EXPECT_EQ(p["total"], total);
    EXPECT_GT(p["processed"].get<int>(), before["processed"].get<int>());
    EXPECT_LE(p["processed"].get<int>() - before["processed"].get<int>(), 16);
    EXPECT_GE(reports[i]["timings"]["prompt_ms"].get<double>(), reports[i - 1]["timings"]["prompt_ms"].get<double>());
  }
  EXPECT_EQ(reports.back()["prompt_progress"]["processed"], total);
  ASSERT_FALSE(texts.empty());
  for (const json& t : texts) EXPECT_TRUE(t.contains("timings")) << t.dump();
  // Again: the cache gives all but the last token, and one batch is left.
  const auto [again, unused] = progress_of(body);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again.front()["prompt_progress"]["cache"], total - 1);
  EXPECT_EQ(again.front()["prompt_progress"]["processed"], total - 1);
  // Without them, neither.
  json plain = body;
  plain.erase("return_progress");
  plain.erase("timings_per_token");
  const auto [none, bare] = progress_of(plain);
  EXPECT_TRUE(none.empty());
  for (const json& t : bare) EXPECT_FALSE(t.contains("timings"));
  // A chat's report is a chunk of the role, with the report beside it.
  auto chat = s.post("/v1/chat/completions", {{"messages", {kUser}}, {"max_tokens", 2}, {"stream", true}, {"return_progress", true}});
  ASSERT_TRUE(chat && chat->status == 200);
  const std::vector<json> chunks = events(chat->body);
  ASSERT_FALSE(chunks.empty());
  ASSERT_TRUE(chunks.front().contains("prompt_progress")) << chat->body;
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}
