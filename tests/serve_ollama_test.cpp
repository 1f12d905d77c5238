// Ollama's API on reclaim's port, as Ollama's clients use it: NDJSON streams
// that equal the whole replies, /api/generate with and without the template,
// keep_alive's rules (load, unload, durations), what /api/ps, /api/tags and
// /api/show report, embeddings equal to the OpenAI side's, errors as
// Ollama's {"error"}, and the official ollama-js client.
#include <httplib.h>
#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

// The lines of an NDJSON body, each parsed.
std::vector<json> lines_of(const std::string& body) {
  std::vector<json> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    EXPECT_FALSE(line.empty()) << "an empty line in an NDJSON stream:\n" << body;
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    out.push_back(j);
  }
  return out;
}

// The pieces of a stream joined, with its last line; every line before the
// last is done: false.
std::pair<std::string, json> joined(const std::vector<json>& lines, const char* field) {
  std::string text;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["done"], false) << lines[i].dump();
    text += std::string(field) == "message" ? lines[i]["message"]["content"].get<std::string>()
                                            : lines[i]["response"].get<std::string>();
  }
  return {text, lines.empty() ? json() : lines.back()};
}

// Seconds from now of an RFC 3339 time in UTC, as /api/ps writes expires_at.
double seconds_until(const std::string& rfc3339) {
  std::tm tm{};
  EXPECT_NE(strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%S", &tm), nullptr) << rfc3339;
  return std::difftime(timegm(&tm), std::time(nullptr));
}

json hello_chat(bool stream) {
  return {{"model", "bpe"},
          {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
          {"options", {{"temperature", 0}, {"num_predict", 8}}},
          {"stream", stream}};
}

}  // namespace

TEST(ServeOllama, ChatAndGenerateStreamLinesThatEqualTheWholeReply) {
  Served s;
  // The replies below are compared token for token, so each must be decoded
  // the same way (engine/parity.h): after this first one, each finds the
  // prompt in the cache and decodes its last token alone.
  s.post_json("/api/chat", hello_chat(false));
  // Ollama streams unless told not to.
  auto streamed = s.post("/api/chat", json{{"model", "bpe"},
                                           {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
                                           {"options", {{"temperature", 0}, {"num_predict", 8}}}});
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "application/x-ndjson");
  const auto [chat_text, chat_last] = joined(lines_of(streamed->body), "message");
  EXPECT_EQ(chat_last["done"], true) << chat_last.dump();
  EXPECT_EQ(chat_last["done_reason"], "length");
  EXPECT_EQ(chat_last["eval_count"], 8);
  EXPECT_GT(chat_last["prompt_eval_count"].get<int>(), 0);
  EXPECT_GE(chat_last["total_duration"].get<int64_t>(), chat_last["eval_duration"].get<int64_t>());
  EXPECT_EQ(chat_last["model"], "bpe");

  const json whole = s.post_json("/api/chat", hello_chat(false));
  EXPECT_EQ(whole["done"], true);
  EXPECT_EQ(whole["message"]["role"], "assistant");
  EXPECT_EQ(whole["message"]["content"], chat_text);

  // Ollama's defaults (repeat_penalty 1.1 over the last 64) are OpenAI's
  // request with them set: the same greedy reply.
  const json openai = s.post_json("/v1/chat/completions", {{"model", "bpe"},
                                                           {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
                                                           {"temperature", 0},
                                                           {"max_tokens", 8},
                                                           {"repeat_penalty", 1.1},
                                                           {"repeat_last_n", 64}});
  EXPECT_EQ(openai["choices"][0]["message"]["content"], chat_text);

  // /api/generate renders the prompt with the template, as a user's message.
  auto gen = s.post("/api/generate", json{{"model", "bpe"}, {"prompt", "hello"}, {"options", {{"temperature", 0}, {"num_predict", 8}}}});
  ASSERT_TRUE(gen);
  const auto [gen_text, gen_last] = joined(lines_of(gen->body), "response");
  EXPECT_EQ(gen_text, chat_text);
  EXPECT_EQ(gen_last["done"], true);

  // raw: the prompt as it is, as /v1/completions takes it; first once for
  // the cache, as above.
  s.post_json("/v1/completions", {{"model", "bpe"}, {"prompt", "hello"}, {"temperature", 0}, {"max_tokens", 1}});
  const json raw = s.post_json("/api/generate", {{"model", "bpe"}, {"prompt", "hello"}, {"raw", true}, {"stream", false},
                                                 {"options", {{"temperature", 0}, {"num_predict", 6}, {"repeat_penalty", 1}}}});
  const json completion = s.post_json("/v1/completions", {{"model", "bpe"}, {"prompt", "hello"}, {"temperature", 0}, {"max_tokens", 6}});
  EXPECT_EQ(raw["response"], completion["choices"][0]["text"]) << raw.dump();
  EXPECT_EQ(raw["eval_count"], 6);

  // Without num_predict there is no limit but the context (OpenAI's
  // completions stop at 16): the reply runs to its end.
  const json unbounded = s.post_json("/api/generate", {{"model", "bpe"}, {"prompt", "hello"}, {"raw", true}, {"stream", false},
                                                       {"options", {{"temperature", 0}}}});
  EXPECT_GT(unbounded["eval_count"].get<int>(), 16) << unbounded.dump();

  // Ollama's stops: any number of them (OpenAI takes 4). The fifth is the
  // reply's first three tokens, so the reply stops there.
  const json three = s.post_json("/v1/completions", {{"model", "bpe"}, {"prompt", "hello"}, {"temperature", 0}, {"max_tokens", 3}});
  const json stops = s.post_json("/api/generate", {{"model", "bpe"}, {"prompt", "hello"}, {"raw", true}, {"stream", false},
                                                   {"options", {{"temperature", 0}, {"num_predict", 6}, {"repeat_penalty", 1},
                                                                {"stop", {"zq#1", "zq#2", "zq#3", "zq#4", three["choices"][0]["text"]}}}}});
  EXPECT_EQ(stops["done_reason"], "stop") << stops.dump();
  EXPECT_LT(stops["eval_count"].get<int>(), 6) << stops.dump();
  s.expect_clean();
}

TEST(ServeOllama, KeepAliveLoadsUnloadsAndSetsTheDeadlineThatPsReports) {
  Served s;
  // No prompt: Ollama's way to load, with this keep-alive.
  const json loaded = s.post_json("/api/generate", {{"model", "spm"}, {"keep_alive", "1h30m"}});
  EXPECT_EQ(loaded["done"], true);
  EXPECT_EQ(loaded["done_reason"], "load");
  EXPECT_EQ(s.model("spm")["state"], "loaded");
  json ps = s.get("/api/ps");
  ASSERT_EQ(ps["models"].size(), 1u) << ps.dump();
  const json& m = ps["models"][0];
  EXPECT_EQ(m["name"], "spm");
  // The ledger's bytes, as /v1/models has them.
  EXPECT_EQ(m["size"], s.model("spm")["bytes"]);
  EXPECT_GT(m["size"].get<int64_t>(), 0);
  EXPECT_EQ(m["size_vram"], 0);  // a CPU build
  const double left = seconds_until(m["expires_at"]);
  EXPECT_GT(left, 85 * 60) << m.dump();
  EXPECT_LT(left, 95 * 60) << m.dump();
  EXPECT_EQ(m["details"]["format"], "gguf");

  // -1: kept; ps says far away.
  s.post_json("/api/chat", {{"model", "spm"}, {"messages", json::array()}, {"keep_alive", -1}});
  ps = s.get("/api/ps");
  EXPECT_GT(seconds_until(ps["models"][0]["expires_at"]), 100.0 * 365 * 24 * 3600) << ps.dump();

  // 0: unloaded now.
  const json unloaded = s.post_json("/api/chat", {{"model", "spm"}, {"keep_alive", 0}});
  EXPECT_EQ(unloaded["done_reason"], "unload");
  EXPECT_EQ(unloaded["message"]["content"], "");
  EXPECT_EQ(s.model("spm")["state"], "unloaded");
  EXPECT_EQ(s.get("/api/ps")["models"].size(), 0u);

  // A request's keep_alive 0 unloads once it is answered.
  const json once = s.post_json("/api/generate", {{"model", "spm"}, {"prompt", "hi"}, {"stream", false}, {"keep_alive", "0s"},
                                                  {"options", {{"num_predict", 2}}}});
  EXPECT_EQ(once["eval_count"], 2);
  EXPECT_TRUE(s.until([&] { return s.model("spm")["state"] == "unloaded"; })) << s.model("spm").dump();

  expect_ollama_error(s.post("/api/generate", {{"model", "spm"}, {"keep_alive", "5x"}}), 400, "keep_alive");
  expect_ollama_error(s.post("/api/generate", {{"model", "nope"}, {"keep_alive", 0}}), 404, "nope");
  s.expect_clean();
}

TEST(ServeOllama, TagsShowAndVersionDescribeTheModels) {
  Served s;
  const json tags = s.get("/api/tags");
  ASSERT_EQ(tags["models"].size(), 2u) << tags.dump();
  for (const json& m : tags["models"]) {
    EXPECT_GT(m["size"].get<int64_t>(), 0) << m.dump();
    EXPECT_EQ(m["digest"].get<std::string>().size(), 64u) << m.dump();
    EXPECT_EQ(m["details"]["format"], "gguf");
    EXPECT_EQ(m["details"]["family"], "llama") << m.dump();
    EXPECT_FALSE(m["details"]["parameter_size"].get<std::string>().empty());
  }
  // Listing reads headers, it loads nothing.
  EXPECT_EQ(s.model("bpe")["state"], "unloaded");

  const json show = s.post_json("/api/show", {{"model", "spm"}});
  EXPECT_EQ(show["details"]["quantization_level"], "F16") << show["details"].dump();
  EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(show["model_info"]["llama.embedding_length"], 128);
  EXPECT_GT(show["model_info"]["general.parameter_count"].get<int64_t>(), 0);
  EXPECT_NE(std::find(show["capabilities"].begin(), show["capabilities"].end(), "completion"), show["capabilities"].end());
  EXPECT_EQ(s.post_json("/api/show", {{"name", "bpe"}})["details"]["quantization_level"], "Q8_0");
  expect_ollama_error(s.post("/api/show", {{"model", "nope"}}), 404, "nope");
  expect_ollama_error(s.post("/api/show", json::object()), 400, "model");

  const json version = s.get("/api/version");
  EXPECT_FALSE(version["version"].get<std::string>().empty());
  s.expect_clean();
}

TEST(ServeOllama, EmbedEqualsTheOpenAiSidesVectors) {
  Served s;
  const json openai = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", {"a cat", "the river runs"}}});
  const json embed = s.post_json("/api/embed", {{"model", "bpe"}, {"input", {"a cat", "the river runs"}}});
  ASSERT_EQ(embed["embeddings"].size(), 2u) << embed.dump();
  EXPECT_EQ(embed["embeddings"][1], openai["data"][1]["embedding"]);
  EXPECT_EQ(embed["prompt_eval_count"], openai["usage"]["prompt_tokens"]);
  EXPECT_EQ(embed["model"], "bpe");
  const json legacy = s.post_json("/api/embeddings", {{"model", "bpe"}, {"prompt", "a cat"}});
  EXPECT_EQ(legacy["embedding"], openai["data"][0]["embedding"]);

  // Longer than the model's context (a sequence of its batch, 256 here):
  // cut to it by default, refused with truncate false.
  std::string longer;
  for (int i = 0; i < 5000; ++i) longer += "river ";
  const json cut = s.post_json("/api/embed", {{"model", "bpe"}, {"input", longer}});
  EXPECT_EQ(cut["embeddings"].size(), 1u);
  expect_ollama_error(s.post("/api/embed", {{"model", "bpe"}, {"input", longer}, {"truncate", false}}), 400, "context");
  expect_ollama_error(s.post("/api/embed", {{"model", "bpe"}, {"input", 5}}), 400, "input");
  s.expect_clean();
}

TEST(ServeOllama, MistakesAreOllamaErrorsThatNameTheField) {
  Served s({"--ctx", "1024"});
  json with_image = hello_chat(false);
  with_image["messages"][0]["images"] = {"aGVsbG8="};
  expect_ollama_error(s.post("/api/chat", with_image), 400, "images");
  expect_ollama_error(s.post("/api/generate", {{"model", "bpe"}, {"prompt", "x"}, {"suffix", "y"}}), 400, "suffix");
  expect_ollama_error(s.post("/api/generate", {{"model", "bpe"}, {"prompt", "x"}, {"context", {1, 2}}}), 400, "context");
  expect_ollama_error(s.post("/api/generate", {{"model", "bpe"}, {"prompt", "x"}, {"template", "{{ .Prompt }}"}}), 400, "template");
  json bad_format = hello_chat(false);
  bad_format["format"] = "yaml";
  expect_ollama_error(s.post("/api/chat", bad_format), 400, "format");
  json bad_option = hello_chat(false);
  bad_option["options"]["temperature"] = "hot";
  expect_ollama_error(s.post("/api/chat", bad_option), 400, "temperature");
  json unknown = hello_chat(false);
  unknown["model"] = "nope";
  expect_ollama_error(s.post("/api/chat", unknown), 404, "nope");
  auto r = s.http().Post("/api/chat", "{not json", "application/json");
  expect_ollama_error(r, 400, "JSON");

  // An agent's transcript: a call with its arguments as an object, and the
  // tool's answer named by tool_name.
  json transcript = hello_chat(false);
  transcript["messages"] = {{{"role", "user"}, {"content", "Weather in Paris?"}},
                            {{"role", "assistant"}, {"content", ""},
                             {"tool_calls", {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
                            {{"role", "tool"}, {"tool_name", "get_weather"}, {"content", "18 degrees"}}};
  const json replayed = s.post_json("/api/chat", transcript);
  EXPECT_EQ(replayed["done"], true) << replayed.dump();

  // format "json": the reply is a JSON object.
  json as_json = hello_chat(false);
  as_json["format"] = "json";
  as_json["options"]["num_predict"] = 900;
  const json j = s.post_json("/api/chat", as_json);
  EXPECT_EQ(j["done_reason"], "stop") << j.dump();
  EXPECT_TRUE(json::parse(j["message"]["content"].get<std::string>(), nullptr, false).is_object()) << j.dump();
  s.expect_clean();
}

TEST(ServeOllama, AClientThatLeavesAStreamLeavesNothing) {
  Served s({"--ctx", "1024"});
  // Greedy on random weights runs to its limit: seconds, far longer than
  // the client stays.
  json body = hello_chat(true);
  body["options"]["num_predict"] = 900;
  leave_after_first_chunk(s.port(), body, "/api/chat", "\"done\":false");
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 0; })) << s.model("bpe").dump();
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("reclaim_requests_total{outcome=\"client_gone\"} 1\n"), std::string::npos) << m->body;
  s.expect_clean();
}

TEST(ServeOllama, TheOfficialOllamaClient) {
  const std::string client = RECLAIM_OLLAMA_CLIENT;
  ASSERT_FALSE(client.empty()) << "built without RECLAIM_OLLAMA_CLIENT: run scripts/setup, which fetches it";
  Served s;
  // The script compares its replies token for token: after this one, each
  // finds the prompt in the cache and is decoded the same way
  // (engine/parity.h).
  s.post_json("/api/chat", {{"model", "bpe"}, {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
                            {"options", {{"temperature", 0}, {"num_predict", 1}}}, {"stream", false}});
  int status = 0;
  const std::string out = run_sdk_script(RECLAIM_OLLAMA_SCRIPT, client, s.port(), "bpe", status);
  ASSERT_EQ(status, 0) << out;
  const json r = json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  EXPECT_EQ(r["version"], true) << out;
  EXPECT_EQ(r["list"], json({"bpe", "spm"})) << out;
  EXPECT_EQ(r["chat"]["done"], true) << out;
  EXPECT_EQ(r["chat"]["eval_count"], 5) << out;
  EXPECT_EQ(r["stream"]["text"], r["chat"]["content"]) << out;
  EXPECT_GT(r["stream"]["parts"].get<int>(), 1) << out;
  EXPECT_EQ(r["generate"]["text"], r["chat"]["content"]) << out;
  EXPECT_EQ(r["ps"]["names"], json({"bpe"})) << out;
  EXPECT_GT(r["ps"]["size"].get<int64_t>(), 0) << out;
  EXPECT_EQ(r["embed"]["count"], 2) << out;
  EXPECT_NEAR(r["embed"]["norm"].get<double>(), 1.0, 1e-4) << out;
  EXPECT_EQ(r["show"]["format"], "gguf") << out;
  EXPECT_EQ(r["error"]["status"], 404) << out;
  EXPECT_EQ(r["unloaded"], true) << out;
  s.expect_clean();
}
