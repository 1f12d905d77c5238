// What llama-server's clients take for granted: a request that names no
// model on a server of one, the OpenAI paths without /v1, a JSON body sent
// with whatever Content-Type (curl's --data sends a form's), and the key as
// X-Api-Key.
#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>
#include <thread>
#include <vector>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

const json kPrompt = {{"prompt", "Once"}, {"max_tokens", 2}, {"temperature", 0}};
const json kChat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}, {"temperature", 0}};

json with(json body, const json& fields) {
  body.merge_patch(fields);
  return body;
}

}  // namespace

TEST(ServeCompat, AServerOfOneModelNeedsNoNameAndAnswersWithoutTheV1Prefix) {
  Served s({"-m", spm() + ":only"}, false);
  {
    const json r = s.post_json("/v1/completions", kPrompt);
    EXPECT_EQ(r["model"], "only");
    EXPECT_EQ(r["usage"]["completion_tokens"], 2);
    // llama.cpp's build, as llama-server gives it ("b1-80fb11a").
    EXPECT_EQ(r["system_fingerprint"].get<std::string>().rfind('b', 0), 0u) << r.dump();
    // Two tokens: the first from the prompt's logits, one decode for the second.
    EXPECT_GT(r["timings"]["predicted_per_token_ms"].get<double>(), 0) << r.dump();
    EXPECT_DOUBLE_EQ(r["timings"]["predicted_per_token_ms"].get<double>(), r["timings"]["predicted_ms"].get<double>());
  }
  // llama-server's /completions is its own shape, as /completion.
  for (const char* path : {"/completion", "/completions"}) {
    const json r = s.post_json(path, kPrompt);
    EXPECT_EQ(r["model"], "only") << path;
    EXPECT_EQ(r["tokens_predicted"], 2) << path;
  }
  for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
    const json r = s.post_json(path, kChat);
    EXPECT_EQ(r["model"], "only") << path;
    EXPECT_EQ(r["object"], "chat.completion") << path;
  }
  // A null model is one left out.
  EXPECT_EQ(s.post_json("/v1/completions", with(kPrompt, {{"model", nullptr}}))["model"], "only");
  const json e = s.post_json("/embeddings", {{"input", "Hello"}});
  EXPECT_EQ(e["model"], "only");
  EXPECT_EQ(e["data"].size(), 1u);
  const json models = s.get("/models");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "only");
  // As llama-server does, a server of one model answers whatever name a
  // client sends (its own default, say), and says which model answered.
  EXPECT_EQ(s.post_json("/v1/completions", with(kPrompt, {{"model", "gpt-4o-mini"}}))["model"], "only");
  EXPECT_EQ(s.post_json("/v1/chat/completions", with(kChat, {{"model", "other"}}))["model"], "only");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

TEST(ServeCompat, AServerThatMayFindMoreModelsTellsAnUnknownNameApart) {
  // One model now, but a folder where more may appear: a name it does not
  // have may be one still to come, so it is refused rather than stood in for.
  const std::string dir = temp_path("one-model-folder");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(spm(), dir + "/only.gguf", std::filesystem::copy_options::overwrite_existing);
  Served s({"--models-dir", dir}, false);
  EXPECT_EQ(s.post_json("/v1/completions", kPrompt)["model"], "only");
  expect_error(s.post("/v1/completions", with(kPrompt, {{"model", "other"}})), 404, "other");
  // In each API's own shape.
  const auto r = s.post("/v1/messages", {{"model", "other"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error") << r->body;
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

TEST(ServeCompat, AServerOfSeveralNeedsTheNameOrItsDefault) {
  {
    Served s;
    expect_error(s.post("/v1/chat/completions", kChat), 400, "several models");
    expect_error(s.post("/embeddings", {{"input", "Hello"}}), 400, "several models");
    s.expect_clean();
  }
  Served s({"--default-model", "bpe"});
  EXPECT_EQ(s.post_json("/v1/chat/completions", kChat)["model"], "bpe");
  EXPECT_EQ(s.post_json("/v1/chat/completions", with(kChat, {{"model", "spm"}}))["model"], "spm");
  s.expect_clean();
  // A default that is no model's is a mistake at start.
  const Result r = run("serve --port 0 -m " + spm() + ":spm --default-model nope");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--default-model nope"), std::string::npos) << r.out;
}

TEST(ServeCompat, TheBodyIsJsonWhateverItsContentTypeSays) {
  Served s({"-m", spm() + ":only"}, false);
  // Over httplib's 8 KiB for a form: the padding is JSON's own whitespace.
  const std::string body = json(kPrompt).dump() + std::string(20000, ' ');
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain", "application/json"}) {
    auto r = s.http().Post("/v1/completions", body, type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 200) << type << ": " << r->body;
  }
  // The size limit holds whatever the type.
  const std::string huge = json(kPrompt).dump() + std::string(33 << 20, ' ');
  for (const char* type : {"application/x-www-form-urlencoded", "application/json"}) {
    expect_error(s.http().Post("/v1/completions", huge, type), 413, "larger than");
  }
  httplib::MultipartFormDataItems form = {{"prompt", "Once", "", ""}};
  expect_error(s.http().Post("/v1/completions", form), 415, "multipart");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

TEST(ServeCompat, TheKeyMayComeAsXApiKey) {
  Served s({"-m", spm() + ":only", "--api-key", "k-123"}, false);
  s.http().set_default_headers({{"X-Api-Key", "k-123"}});
  EXPECT_EQ(s.get("/v1/models")["data"].size(), 1u);
  EXPECT_EQ(s.post_json("/v1/completions", kPrompt)["usage"]["completion_tokens"], 2);
  s.http().set_default_headers({{"X-Api-Key", "k-124"}});
  expect_error(s.http().Get("/v1/models"), 401, "X-Api-Key");
  s.http().set_default_headers({});
  expect_error(s.http().Get("/v1/models"), 401, "API key");
  s.http().set_default_headers({{"X-Api-Key", "k-123"}});
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

// A self-signed certificate for localhost and its key, made by the openssl
// command (Debian's ca-certificates depends on it): {certificate, key}.
std::pair<std::string, std::string> self_signed(const std::string& name) {
  const std::string cert = temp_path(name + "-cert.pem"), key = temp_path(name + "-key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout " + key + " -out " + cert +
                          " >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return {cert, key};
}

TEST(ServeCompat, HttpsWithSeveralKeysFromFlagsAndAFile) {
  const auto [cert, key] = self_signed("https");
  const std::string keys = temp_path("api-keys");
  std::ofstream(keys) << "# the team's keys\n\nk-file-1\n  k-file-2  \r\n";
  Served s({"-m", spm() + ":only", "--ssl-cert-file", cert, "--ssl-key-file", key, "--api-key", "k-flag-1", "--api-key",
            "k-flag-2", "--api-key-file", keys},
           false);
  EXPECT_EQ(s.http().Get("/health")->status, 200);
  for (const std::string k : {"k-flag-1", "k-flag-2", "k-file-1", "k-file-2"}) {
    s.http().set_default_headers({{"Authorization", "Bearer " + k}});
    EXPECT_EQ(s.get("/v1/models")["data"].size(), 1u) << k;
  }
  for (const std::string k : {"k-flag", "# the team's keys", "k-file-3", ""}) {
    s.http().set_default_headers({{"X-Api-Key", k}});
    expect_error(s.http().Get("/v1/models"), 401, "API key");
  }
  s.http().set_default_headers({{"X-Api-Key", "k-file-1"}});
  EXPECT_EQ(s.post_json("/v1/completions", kPrompt)["usage"]["completion_tokens"], 2);
  // The dashboard's page, over HTTPS as its data is.
  auto page = s.http().Get("/", {{"Accept", "text/html"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  // Plain HTTP to the HTTPS port gets no answer.
  httplib::Client plain("127.0.0.1", s.port());
  plain.set_read_timeout(5, 0);
  EXPECT_FALSE(plain.Get("/health"));
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

TEST(ServeCompat, AMistakeInTheCertificateOrKeysIsOneLineAndExitTwo) {
  const auto [cert, key] = self_signed("mine");
  const auto [other_cert, other_key] = self_signed("other");
  const std::string empty_keys = temp_path("no-keys");
  std::ofstream(empty_keys) << "# none yet\n\n";
  const std::string base = "serve --port 0 -m " + spm() + ":only ";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--ssl-cert-file " + cert + " --ssl-key-file " + other_key, "key values mismatch"},
           {"--ssl-cert-file " + cert, "HTTPS needs both --ssl-cert-file and --ssl-key-file"},
           {"--ssl-cert-file " + spm() + " --ssl-key-file " + key, "cannot serve HTTPS with certificate '" + spm() + "'"},
           {"--ssl-cert-file " + temp_path("nowhere.pem") + " --ssl-key-file " + key, "--ssl-cert-file '"},
           {"--api-key-file " + empty_keys, "has no key"},
           {"--api-key ''", "--api-key: a key cannot be empty"}}) {
    const Result r = run(base + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
  }
}

// llama-server's own /completion, as its tests/unit/test_completion.py
// reads it: whole or streamed, n_predict, return_tokens.
TEST(ServeCompat, TheNativeCompletionAnswersInLlamaServersShape) {
  Served s({"-m", spm() + ":only"}, false);
  const json body = {{"prompt", "I believe the meaning of life is"}, {"n_predict", 8}, {"temperature", 0}};
  const json whole = s.post_json("/completion", with(body, {{"return_tokens", true}}));
  EXPECT_EQ(whole["tokens_predicted"], 8) << whole.dump();
  EXPECT_GT(whole["tokens_evaluated"].get<int>(), 0);
  EXPECT_EQ(whole["tokens"].size(), 8u);
  EXPECT_EQ(whole["stop"], true);
  EXPECT_EQ(whole["stop_type"], "limit");
  EXPECT_EQ(whole["timings"]["predicted_n"], 8);
  EXPECT_FALSE(whole["content"].get<std::string>().empty());
  // The stream: the same text in pieces, then the last object with stop.
  auto streamed = s.post("/completion", with(body, {{"stream", true}}));
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  std::string text;
  json last;
  for (size_t at = streamed->body.find("data: "); at != std::string::npos; at = streamed->body.find("data: ", at + 6)) {
    const size_t end = streamed->body.find("\n\n", at);
    const json chunk = json::parse(streamed->body.substr(at + 6, end - at - 6));
    text += chunk["content"].get<std::string>();
    last = chunk;
  }
  EXPECT_EQ(streamed->body.find("[DONE]"), std::string::npos);
  EXPECT_EQ(text, whole["content"]);
  EXPECT_EQ(last["stop"], true);
  EXPECT_EQ(last["tokens_predicted"], 8);
  EXPECT_EQ(s.post_json("/completion", body)["tokens"].size(), 0u);  // without return_tokens
  // n_predict -1 (llama-server's default) runs to the end token or the context's end.
  const json open = s.post_json("/completion", with(body, {{"n_predict", -1}}));
  EXPECT_GT(open["tokens_predicted"].get<int>(), 8) << open.dump();
  expect_error(s.post("/completion", with(body, {{"n_predict", "many"}})), 400, "n_predict");
  // n_probs: each token with its top ones, in llama-server's shape.
  const json probs = s.post_json("/completion", with(body, {{"n_probs", 5}}));
  ASSERT_EQ(probs["completion_probabilities"].size(), 8u) << probs.dump();
  for (size_t i = 0; i < 8; ++i) {
    const json& t = probs["completion_probabilities"][i];
    EXPECT_EQ(t["id"], whole["tokens"][i]) << t.dump();  // greedy: the same tokens
    EXPECT_TRUE(t["token"].is_string() && t["bytes"].is_array());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 5u);
    EXPECT_EQ(t["top_logprobs"][0]["id"], t["id"]);  // greedy picks the top one
    EXPECT_TRUE(t["top_logprobs"][4]["id"].is_number_integer());
  }
  auto probs_streamed = s.post("/completion", with(body, {{"n_probs", 5}, {"stream", true}}));
  ASSERT_TRUE(probs_streamed);
  size_t entries = 0;
  for (size_t at = probs_streamed->body.find("data: "); at != std::string::npos; at = probs_streamed->body.find("data: ", at + 6)) {
    const size_t end = probs_streamed->body.find("\n\n", at);
    entries += json::parse(probs_streamed->body.substr(at + 6, end - at - 6)).value("completion_probabilities", json::array()).size();
  }
  EXPECT_EQ(entries, 8u);
  expect_error(s.post("/completion", with(body, {{"n_probs", 99}})), 400, "'n_probs' must be an integer from 0 to 20");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

// llama-server's /infill, as editors call it (llama.vim, llama.vscode): the
// prompt is the code around the cursor in the model's fill-in-the-middle
// tokens. make-test-model --fim adds Qwen2.5-Coder's to the bpe vocabulary,
// file separators too; the spm one has none, and says so.
TEST(ServeCompat, InfillPutsTheCodeAroundTheCursorInTheModelsFimTokens) {
  const std::string coder = temp_path("coder-fim.gguf");
  const Result made = run("make-test-model --out " + coder + " --vocab bpe --embd 64 --layers 2 --type f32 --fim");
  ASSERT_EQ(made.status, 0) << made.out;
  Served s({"-m", coder + ":coder", "-m", spm() + ":plain", "--ctx", "2048", "--batch", "512"}, false);
  auto count = [&](const std::string& text) {
    return static_cast<int>(s.post_json("/tokenize", {{"model", "coder"}, {"content", text}})["tokens"].size());
  };
  const std::string prefix = "#include <cstdio>\n\nint main() {\n", prompt = "    int n = ", suffix = "}\n";
  const json body = {{"model", "coder"}, {"input_prefix", prefix}, {"prompt", prompt}, {"input_suffix", suffix},
                     {"n_predict", 4}, {"temperature", 0}};
  const json plain = s.post_json("/infill", body);
  EXPECT_EQ(plain["tokens_predicted"], 4) << plain.dump();
  EXPECT_TRUE(plain["content"].is_string());
  // [REP]myproject\n [SEP]filename\n [PRE]prefix prompt [SUF]suffix [MID]
  const int fixed = 1 + count("myproject\n") + 1 + count("filename\n") + 3;
  EXPECT_EQ(plain["tokens_evaluated"], fixed + count(prefix) + count(prompt) + count(suffix)) << plain.dump();
  // Another file for context goes under its name, before the rest.
  const json extra = s.post_json("/infill", with(body, {{"input_extra", {{{"filename", "llama.h"}, {"text", "int llama_n();\n"}}}}}));
  EXPECT_EQ(extra["tokens_evaluated"].get<int>() - plain["tokens_evaluated"].get<int>(),
            1 + count("llama.h\n") + count("int llama_n();\n"))
      << extra.dump();
  // A prefix longer than three quarters of a batch (512) keeps its end.
  std::string long_prefix;
  for (int i = 0; i < 400; ++i) long_prefix += "x = x + " + std::to_string(i) + ";\n";
  const json cut = s.post_json("/infill", with(body, {{"input_prefix", long_prefix}}));
  EXPECT_EQ(cut["tokens_evaluated"], fixed + 3 * (512 / 4) + count(prompt) + count(suffix)) << cut.dump();
  // Streamed, as editors ask for it.
  auto streamed = s.post("/infill", with(body, {{"stream", true}}));
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_NE(streamed->body.find("\"stop\":true"), std::string::npos) << streamed->body;

  expect_error(s.post("/infill", with(body, {{"model", "plain"}})), 400, "fill-in-the-middle");
  expect_error(s.post("/infill", {{"model", "coder"}, {"input_suffix", suffix}}), 400, "'input_prefix' is required");
  for (const json& bad : {json::object(), json{{"filename", "ok"}}, json{{"filename", 123}}, json{{"filename", 123}, {"text", "abc"}},
                          json{{"filename", 123}, {"text", 456}}}) {
    expect_error(s.post("/infill", with(body, {{"input_extra", json::array({bad})}})), 400, "input_extra");
  }
  expect_error(s.post("/infill", with(body, {{"input_extra", "llama.h"}})), 400, "'input_extra' must be an array");
  for (const char* m : {"coder", "plain"}) s.post("/v1/models/unload", {{"model", m}});
  s.expect_clean();
}

// A last assistant message is continued, as llama-server and Ollama read it
// (a prefill: the reply is its rest); add_generation_prompt false leaves the
// template's assistant header out; asking for both is a 400.
TEST(ServeCompat, ALastAssistantMessageIsContinuedAndTheGenerationPromptCanBeLeftOut) {
  Served s({"-m", bpe() + ":chatml"}, false);  // Qwen2's ChatML template
  const json user = {{"role", "user"}, {"content", "What is the best book"}};
  const json prefill = {{"role", "assistant"}, {"content", "Whill"}};
  auto prompt = [&](const json& body) { return s.post_json("/apply-template", body)["prompt"].get<std::string>(); };
  const std::string turn = prompt({{"messages", {user}}});
  EXPECT_TRUE(turn.ends_with("<|im_start|>assistant\n")) << turn;
  const std::string bare = prompt({{"messages", {user}}, {"add_generation_prompt", false}});
  EXPECT_FALSE(bare.ends_with("<|im_start|>assistant\n")) << bare;
  EXPECT_TRUE(turn.starts_with(bare)) << bare;
  const std::string continued = prompt({{"messages", {user, prefill}}});
  EXPECT_TRUE(continued.ends_with("<|im_start|>assistant\nWhill")) << continued;
  EXPECT_EQ(prompt({{"messages", {user, prefill}}, {"continue_final_message", true}, {"add_generation_prompt", false}}), continued);
  // The reply is the rest of the message, which stays the client's.
  const json reply = s.post_json("/v1/chat/completions", {{"messages", {user, prefill}}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(reply["usage"]["completion_tokens"], 4) << reply.dump();
  expect_error(s.post("/v1/chat/completions", {{"messages", {user, prefill}}, {"continue_final_message", true},
                                               {"add_generation_prompt", true}, {"max_tokens", 4}}),
               400, "cannot both be true");
  expect_error(s.post("/apply-template", {{"messages", {user, prefill, prefill}}}), 400, "two assistant messages");
  expect_error(s.post("/apply-template", {{"messages", {user}}, {"continue_final_message", true}, {"add_generation_prompt", false}}),
               400, "not the assistant's");
  expect_error(s.post("/apply-template", {{"messages", {user}}, {"continue_final_message", "all"}}), 400,
               "'continue_final_message' must be");
  s.post("/v1/models/unload", {{"model", "chatml"}});
  s.expect_clean();
}

// llama-server's /props and /slots, as its tests/unit/test_basic.py reads
// them: a query that loads nothing.
TEST(ServeCompat, PropsAndSlotsTellTheModelItsContextAndItsSlots) {
  Served s({"-m", spm() + ":only", "--parallel", "2", "--keep-alive", "-1"}, false);
  json props = s.get("/props");
  EXPECT_NE(props["model_path"].get<std::string>().find(".gguf"), std::string::npos) << props.dump();
  EXPECT_EQ(props["model_alias"], "only");
  EXPECT_EQ(props["total_slots"], 2);
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 256);
  EXPECT_EQ(props["default_generation_settings"]["params"]["seed"], 4294967295u);
  EXPECT_EQ(props["is_sleeping"], true);
  EXPECT_EQ(s.model("only")["state"], "unloaded");
  json slots = s.get("/slots");
  ASSERT_EQ(slots.size(), 2u) << slots.dump();
  for (const json& slot : slots) {
    EXPECT_EQ(slot["n_ctx"], 256);
    EXPECT_EQ(slot["is_processing"], false);
    EXPECT_FALSE(slot.contains("params"));
  }
  // A long request in flight holds one slot, and gives it back.
  std::thread request([&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    (void)c.Post("/v1/completions", with(kPrompt, {{"max_tokens", 200}}).dump(), "application/json");
  });
  auto busy = [&] {
    int n = 0;
    for (const json& slot : s.get("/slots")) n += slot["is_processing"] == true;
    return n;
  };
  EXPECT_TRUE(s.until([&] { return busy() == 1; }));
  request.join();
  EXPECT_EQ(busy(), 0);
  EXPECT_EQ(s.get("/props")["is_sleeping"], false);
  auto save = s.post("/slots/0?action=save", {{"filename", "x.bin"}});
  expect_error(save, 501, "not supported");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

TEST(ServeCompat, PropsOfSeveralModelsAreTheRoutersAndNameOneByQuery) {
  Served s;
  const json router = s.get("/props");
  EXPECT_EQ(router["role"], "router");
  EXPECT_EQ(router["models_autoload"], true);
  EXPECT_EQ(s.get("/props?model=bpe")["model_alias"], "bpe");
  expect_error(s.http().Get("/props?model=nowhere"), 404, "nowhere");
  EXPECT_EQ(s.get("/slots").size(), 2u);  // one slot each
  EXPECT_EQ(s.get("/slots?model=spm")[0]["model"], "spm");
  s.expect_clean();
}

TEST(ServeCompat, AServerOfModelsItFoundAnswersPropsAsTheRouterEvenWithOne) {
  // As llama-server started without -m: a router, whatever its models.
  const std::string dir = temp_path("props-router");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(spm(), dir + "/solo.gguf", std::filesystem::copy_options::overwrite_existing);
  {
    Served s({"--models-dir", dir, "--max-loaded", "2"}, false);
    const json router = s.get("/props");
    EXPECT_EQ(router["role"], "router") << router.dump();
    EXPECT_EQ(router["max_instances"], 2);
    EXPECT_EQ(s.get("/props?model=solo")["model_alias"], "solo");
    // A request that names no model still goes to the only one.
    EXPECT_EQ(s.post_json("/v1/completions", kPrompt)["model"], "solo");
  }
  std::filesystem::remove_all(dir);
}

// llama-server's /tokenize, /detokenize and /apply-template, as its own
// tests (tools/server/tests/unit/test_tokenize.py, test_chat_completion.py)
// call them.
TEST(ServeCompat, TokenizeDetokenizeAndApplyTemplateAnswerAsLlamaServers) {
  Served s({"-m", spm() + ":only"}, false);
  const std::string content = "What is the capital of France ?";
  const json tok = s.post_json("/tokenize", {{"content", content}});
  ASSERT_GT(tok["tokens"].size(), 5u) << tok.dump();
  const json detok = s.post_json("/detokenize", {{"tokens", tok["tokens"]}});
  std::string back = detok["content"];
  back.erase(0, back.find_first_not_of(' '));
  EXPECT_EQ(back, content);
  // With the model's BOS first (spm's is 1), and with each token's piece:
  // text where it is whole UTF-8, its bytes where it is not.
  EXPECT_EQ(s.post_json("/tokenize", {{"content", content}, {"add_special", true}})["tokens"][0], 1);
  const json pieces = s.post_json("/tokenize", {{"content", "unicode 媽 and emoji 🤗"}, {"with_pieces", true}});
  std::string joined;
  for (const json& t : pieces["tokens"]) {
    EXPECT_GT(t["id"].get<int>(), 0) << t.dump();
    ASSERT_TRUE(t["piece"].is_string() || t["piece"].is_array()) << t.dump();
    if (t["piece"].is_string()) joined += t["piece"].get<std::string>();
    for (const json& b : t["piece"].is_array() ? t["piece"] : json::array()) joined += static_cast<char>(b.get<int>());
  }
  EXPECT_NE(joined.find("媽"), std::string::npos) << pieces.dump();
  EXPECT_NE(joined.find("🤗"), std::string::npos) << pieces.dump();
  // Strings and ids mixed, as llama-server takes them.
  const json mixed = s.post_json("/tokenize", {{"content", json::array({"Hi", 15, "there"})}});
  EXPECT_EQ(mixed["tokens"][1], 15) << mixed.dump();
  expect_error(s.post("/detokenize", {{"tokens", {1, 99999999}}}), 400, "99999999");
  expect_error(s.post("/tokenize", {{"content", json::array({-4})}}), 400, "-4");
  expect_error(s.post("/tokenize", {{"content", 5}}), 400, "'content'");
  EXPECT_EQ(s.post_json("/tokenize", {{"model", "other"}, {"content", "x"}}), s.post_json("/tokenize", {{"content", "x"}}));

  const json t = s.post_json("/apply-template", {{"messages", {{{"role", "system"}, {"content", "Be brief."}},
                                                                {{"role", "user"}, {"content", "Where is Paris?"}}}}});
  const std::string prompt = t["prompt"];
  EXPECT_NE(prompt.find("Be brief."), std::string::npos) << prompt;
  EXPECT_LT(prompt.find("Be brief."), prompt.find("Where is Paris?")) << prompt;
  expect_error(s.post("/apply-template", json::object()), 400, "'messages'");
  s.post("/v1/models/unload", {{"model", "only"}});
  s.expect_clean();
}

// llama-server's /completion reports what it ran with: generation_settings
// (ignore_eos's bans of every end-of-generation token as biases of null,
// i.e. -inf), the prompt as its tokens read, and response_fields cutting the
// reply to the paths asked for.
TEST(ServeCompat, ACompletionSaysWhatItRanWithAndIgnoreEosBansTheEndTokens) {
  Served s;
  const json body = {{"model", "spm"}, {"prompt", "Once upon a time"}, {"n_predict", 8}, {"temperature", 0}};
  const json plain = s.post_json("/completion", body);
  EXPECT_EQ(plain["generation_settings"]["n_predict"], 8) << plain.dump();
  EXPECT_EQ(plain["generation_settings"]["ignore_eos"], false);
  EXPECT_EQ(plain["generation_settings"]["logit_bias"], json::array());
  EXPECT_EQ(plain["prompt"], "<s> Once upon a time");  // spm adds BOS; its pieces start with a space
  const json ignoring = s.post_json("/completion", with(body, {{"ignore_eos", true}}));
  const json bias = ignoring["generation_settings"]["logit_bias"];
  ASSERT_FALSE(bias.empty()) << ignoring.dump();
  for (const json& b : bias) EXPECT_TRUE(b["bias"].is_null()) << b.dump();
  // The end token (id 2 in llama's spm vocabulary) is among them.
  EXPECT_NE(bias.dump().find("\"token\":2}"), std::string::npos) << bias.dump();
  EXPECT_EQ(ignoring["tokens_predicted"], 8) << ignoring.dump();
  const json cut = s.post_json("/completion", with(body, {{"response_fields", {"content", "generation_settings/n_predict", "prompt", "nope/x"}}}));
  EXPECT_EQ(cut.size(), 3u) << cut.dump();
  EXPECT_EQ(cut["generation_settings/n_predict"], 8);
  EXPECT_EQ(cut["content"], plain["content"]);
  expect_error(s.post("/completion", with(body, {{"response_fields", "content"}})), 400, "response_fields");
  expect_error(s.post("/completion", with(body, {{"ignore_eos", "yes"}})), 400, "ignore_eos");
  s.expect_clean();
}

namespace {

// The variables Vertex AI starts a container with, for one server's start.
class VertexMode {
 public:
  VertexMode() {
    setenv("AIP_MODE", "PREDICTION", 1);
    setenv("AIP_HEALTH_ROUTE", "ping", 1);
  }
  ~VertexMode() {
    unsetenv("AIP_MODE");
    unsetenv("AIP_HEALTH_ROUTE");
  }
  VertexMode(const VertexMode&) = delete;
  VertexMode& operator=(const VertexMode&) = delete;
};

}  // namespace

TEST(ServeCompat, VertexPredictSendsEachInstanceToTheEndpointItNames) {
  std::unique_ptr<Served> s;
  {
    VertexMode vertex;
    s = std::make_unique<Served>(std::vector<std::string>{}, true);
  }
  // Its health route, beside /health.
  EXPECT_EQ(s->get("/ping")["status"], "ok");
  const json instances = {
      with(kChat, {{"@requestFormat", "chatCompletions"}, {"model", "spm"}}),
      {{"@requestFormat", "/v1/embeddings"}, {"model", "bpe"}, {"input", "hello"}},
      // Ollama's endpoints stream unless told: one answer an instance.
      {{"@requestFormat", "apiGenerate"}, {"model", "spm"}, {"prompt", "Once"}, {"options", {{"num_predict", 2}}}},
      {{"@requestFormat", "chatCompletions"}, {"model", "nobody"}, {"messages", kChat["messages"]}},
      {{"@requestFormat", "noSuchEndpoint"}},
      json(3),
      {{"model", "spm"}},
  };
  const json body = s->post_json("/predict", {{"instances", instances}});
  const json& p = body["predictions"];
  ASSERT_EQ(p.size(), instances.size()) << body.dump();
  EXPECT_EQ(p[0]["choices"][0]["message"]["role"], "assistant") << p[0].dump();
  EXPECT_EQ(p[0]["usage"]["completion_tokens"], 2) << p[0].dump();
  // The same as the endpoint answers directly.
  const json direct = s->post_json("/v1/embeddings", {{"model", "bpe"}, {"input", "hello"}});
  EXPECT_EQ(p[1]["data"][0]["embedding"], direct["data"][0]["embedding"]) << p[1].dump().substr(0, 300);
  EXPECT_FALSE(direct["data"][0]["embedding"].empty());
  EXPECT_EQ(p[2]["done"], true) << p[2].dump();
  EXPECT_EQ(p[2]["eval_count"], 2) << p[2].dump();
  // What one instance gets wrong is its own prediction's error, in its
  // endpoint's shape; the others are answered.
  EXPECT_EQ(p[3]["error"]["code"], "model_not_found") << p[3].dump();
  EXPECT_NE(p[4]["error"]["message"].get<std::string>().find("noSuchEndpoint"), std::string::npos) << p[4].dump();
  EXPECT_NE(p[5]["error"]["message"].get<std::string>().find("JSON object"), std::string::npos) << p[5].dump();
  EXPECT_NE(p[6]["error"]["message"].get<std::string>().find("@requestFormat"), std::string::npos) << p[6].dump();

  // The body itself: instances missing, or more than the bound.
  auto r = s->post("/predict", {{"inputs", json::array()}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  r = s->post("/predict", {{"instances", json(std::vector<json>(129, json::object()))}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("128"), std::string::npos) << r->body;
  s->expect_clean();
}

TEST(ServeCompat, WithoutVertexsVariablesThereIsNoPredictRoute) {
  Served s;
  auto r = s.post("/predict", {{"instances", json::array()}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
}

TEST(ServeCompat, NChoicesAreNGenerationsEachAsItsOwnRequestWithTheNextSeedWouldGive) {
  Served s;
  const json sampled = {{"temperature", 1.0}, {"seed", 7}, {"max_tokens", 6}, {"model", "spm"}};
  const json body = with(with(kChat, sampled), {{"n", 3}});
  const json all = s.post_json("/v1/chat/completions", body);
  ASSERT_EQ(all["choices"].size(), 3u) << all.dump();
  int64_t completion = 0;
  for (int i = 0; i < 3; ++i) {
    const json& c = all["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["message"]["role"], "assistant");
    // Choice i is what a request of its own with seed 7 + i answers.
    const json alone = s.post_json("/v1/chat/completions", with(with(kChat, sampled), {{"seed", 7 + i}}));
    EXPECT_EQ(c["message"]["content"], alone["choices"][0]["message"]["content"]) << i;
    completion += alone["usage"]["completion_tokens"].get<int64_t>();
  }
  // The prompt counted once, every choice's completion.
  EXPECT_EQ(all["usage"]["completion_tokens"], completion);
  EXPECT_EQ(all["usage"]["total_tokens"], all["usage"]["prompt_tokens"].get<int64_t>() + completion);

  const json text = s.post_json("/v1/completions", with(with(kPrompt, sampled), {{"n", 2}}));
  ASSERT_EQ(text["choices"].size(), 2u) << text.dump();
  EXPECT_EQ(text["choices"][1]["index"], 1);

  // Refused: streamed, none, past the bound.
  expect_error(s.post("/v1/chat/completions", with(body, {{"stream", true}})), 400, "stream");
  expect_error(s.post("/v1/chat/completions", with(body, {{"n", 0}})), 400, "'n'");
  expect_error(s.post("/v1/chat/completions", with(body, {{"n", 9}})), 400, "1 to 8");
  s.expect_clean();
}

// llama-server's resumable streams: a stream whose request names its
// conversation (X-Conversation-Id) is kept as it is sent, replayed from any
// byte, and runs to its end when its client leaves; DELETE stops it and
// forgets it.
TEST(ServeCompat, AConversationsStreamIsReplayedFromAnyByteAndOutlivesItsClient) {
  Served s;
  const httplib::Headers conv = {{"X-Conversation-Id", "conv-1::bpe"}};
  auto sent = s.http().Post("/v1/chat/completions", conv, chat(12, true).dump(), "application/json");
  ASSERT_TRUE(sent);
  ASSERT_EQ(sent->status, 200) << sent->body;
  const std::string body = sent->body;
  ASSERT_NE(body.find("data: [DONE]"), std::string::npos) << body;

  auto replay = s.http().Get("/v1/stream?conv_id=conv-1%3A%3Abpe&from=0");
  ASSERT_TRUE(replay);
  EXPECT_EQ(replay->status, 200);
  EXPECT_EQ(replay->body, body);
  auto tail = s.http().Get("/v1/stream?conv_id=conv-1%3A%3Abpe&from=10");
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->body, body.substr(10));
  // Found by its own id and by the conversation's, once; another's is not.
  const json found = s.post_json("/v1/streams/lookup", {{"conversation_ids", {"conv-1", "conv-1::bpe", "conv-2"}}});
  ASSERT_EQ(found.size(), 1u) << found.dump();
  EXPECT_EQ(found[0]["conversation_id"], "conv-1::bpe");
  EXPECT_EQ(found[0]["is_done"], true);
  EXPECT_EQ(found[0]["total_bytes"], body.size());

  // A client that leaves after its first chunk: the request runs on, and
  // its whole stream is there to replay.
  leave_after_first_chunk(s.port(), chat(48, true), "/v1/chat/completions", "data: ", "X-Conversation-Id: conv-2\r\n");
  std::string whole;
  ASSERT_TRUE(s.until([&] {
    auto r = s.http().Get("/v1/stream?conv_id=conv-2&from=0");
    if (!r || r->status != 200) return false;
    whole = r->body;
    return whole.find("data: [DONE]") != std::string::npos;
  })) << whole;
  EXPECT_NE(whole.find("\"finish_reason\":\"length\""), std::string::npos) << whole;
  EXPECT_NE(whole.find("\"predicted_n\":48"), std::string::npos) << whole;

  // Stopped: gone, whatever is asked of it after; and each mistake named.
  auto stop = s.http().Delete("/v1/stream?conv_id=conv-1%3A%3Abpe");
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->status, 204);
  expect_error(s.http().Get("/v1/stream?conv_id=conv-1%3A%3Abpe&from=0"), 404, "no stream of conversation");
  auto again = s.http().Delete("/v1/stream?conv_id=conv-1%3A%3Abpe");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 204);
  expect_error(s.http().Get("/v1/stream?from=0"), 400, "conv_id");
  expect_error(s.http().Get("/v1/stream?conv_id=conv-2&from=x"), 400, "from");
  expect_error(s.post("/v1/streams/lookup", {{"conversation_ids", "conv-2"}}), 400, "array");
  // A request refused before its stream starts leaves no session behind.
  auto refused = s.http().Post("/v1/chat/completions", {{"X-Conversation-Id", "conv-3"}},
                               json{{"model", "nope"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}}.dump(),
                               "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 404) << refused->body;
  expect_error(s.http().Get("/v1/stream?conv_id=conv-3"), 404, "no stream of conversation");
  (void)s.http().Delete("/v1/stream?conv_id=conv-2");
  s.expect_clean();
}

// A resumable stream that runs without its client is stopped by DELETE
// within a decode step, counted as a client that went, and its bytes are
// gone with it.
TEST(ServeCompat, AResumableStreamStoppedWhileItRunsEndsAtOnceAndLeavesNothing) {
  Served s({"--threads", "1", "--ctx", "4096"});
  auto metrics = [&] {
    auto m = s.http().Get("/metrics");
    return m ? m->body : std::string();
  };
  json endless = chat(8, true);
  endless.erase("max_tokens");  // to the end of its 4,096 positions: seconds at least
  leave_after_first_chunk(s.port(), endless, "/v1/chat/completions", "data: ", "X-Conversation-Id: endless\r\n");
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  EXPECT_EQ(metric(metrics(), "reclaim_resumable_streams"), 1);
  EXPECT_GT(metric(metrics(), "reclaim_resumable_stream_bytes"), 0);
  // Its bytes are on the ledger, as long as it is kept.
  auto session_on_ledger = [&] {
    const json r = s.get("/v1/resources");
    for (const json& e : r["ledger"]["entries"]) {
      if (e["label"] == "resumable stream 'endless'" && e["kind"] == "buffer" && e["bytes"].get<int64_t>() > 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(s.until(session_on_ledger)) << s.get("/v1/resources")["ledger"]["entries"].dump();
  auto stop = s.http().Delete("/v1/stream?conv_id=endless");
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->status, 204);
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 0; }, 10));
  const std::string m = metrics();
  EXPECT_EQ(metric(m, "reclaim_requests_total{outcome=\"client_gone\"}"), 1) << m;
  EXPECT_EQ(metric(m, "reclaim_resumable_streams"), 0);
  EXPECT_EQ(metric(m, "reclaim_resumable_stream_bytes"), 0);
  EXPECT_FALSE(session_on_ledger());
  expect_error(s.http().Get("/v1/stream?conv_id=endless&from=0"), 404, "no stream of conversation");
  s.expect_clean();
}
