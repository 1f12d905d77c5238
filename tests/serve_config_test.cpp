// `reclaim serve --config FILE`: each model's own settings, and a mistake
// in the file as one line naming the file, the line and the key, exit 2.
#include <httplib.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

void expect_refused(const std::string& text, const std::string& says) {
  const std::string path = write_config("refused.toml", text);
  const Result r = run("serve --port 0 --config " + path);
  EXPECT_EQ(r.status, 2) << r.out;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("reclaim: error: " + path + ":", 0), 0u) << r.out;
  EXPECT_NE(last.find(says), std::string::npos) << r.out;
}

}  // namespace

TEST(ServeConfig, AMistakeIsOneLineNamingTheFileTheLineAndTheKey) {
  const std::string m = "[models.a]\npath = \"" + spm() + "\"\n";
  expect_refused(m + "ctx = \"big\"\n", ":3: models.a.ctx: must be an integer");
  expect_refused(m + "parallel = 0\n", ":3: models.a.parallel: must be 1..256");
  expect_refused(m + "colour = 1\n", ":3: models.a.colour: is not a model setting");
  expect_refused(m + "keep_alive = \"5 weeks\"\n", ":3: models.a.keep_alive:");
  expect_refused(m + "aliases = [\"../up\"]\n", ":3: models.a.aliases: model name '../up' is not a name");
  expect_refused(m + "[models.a.defaults]\ntemperature = -4\n", ":4: models.a.defaults.temperature:");
  expect_refused(m + "[models.a.defaults]\nmessages = []\n", ":4: models.a.defaults.messages: is the request's own");
  // A table is an object field, checked as a request's would be.
  expect_refused(m + "[models.a.defaults]\nresponse_format = { type = 1 }\n", ":4: models.a.defaults.response_format:");
  // A field only a chat reads is checked as a chat's.
  expect_refused(m + "[models.a.defaults]\nchat_template_kwargs = { enable_thinking = \"no\" }\n",
                 ":4: models.a.defaults.chat_template_kwargs:");
  expect_refused("[models.a]\nctx = 4\n", ":1: models.a: has no 'path'");
  expect_refused("[models.a\npath = 1\n", ":1: ");
  expect_refused("[model.a]\npath = \"x\"\n", ":1: model: is not a section of the file (models)");
  expect_refused("[models.a]\npath = \"" + temp_path("nowhere.gguf") + "\"\n", "models.a.path: ");
  expect_refused(m + "aliases = [\"spm\"]\n[models.b]\npath = \"" + spm() + "\"\naliases = [\"spm\"]\n",
                 ":6: models.b.aliases: 'spm' is already a name of models.a (line 3)");
}

TEST(ServeConfig, EachModelHasItsOwnSettingsAndTheFlagsAreTheDefaults) {
  const std::string path = write_config("models.toml",
                                        "[models.\"tiny:chat\"]\n"
                                        "path = \"" + spm() + "\"\n"
                                        "aliases = [\"tiny\", \"org/tiny:F16\"]\n"
                                        "ctx = 512\n"
                                        "parallel = 2\n"
                                        "chat_template = \"chatml\"\n"
                                        "preload = true\n"
                                        "[models.\"tiny:chat\".defaults]\n"
                                        "max_tokens = 3\n"
                                        "temperature = 0\n"
                                        "chat_template_kwargs = { enable_thinking = false }\n"
                                        "\n"
                                        "[models.brief]\n"
                                        "path = \"" + bpe() + "\"\n"
                                        "keep_alive = 0\n");
  Served s({"--config", path});
  // Preloaded, its batch of two sequences, listed with its aliases.
  const json m = s.model("tiny:chat");
  EXPECT_EQ(m["state"], "loaded");
  EXPECT_EQ(m["aliases"], json::array({"tiny", "org/tiny:F16"}));
  // Called by an alias; the spm vocab has no template of its own, so the
  // chat works only through the configured one; max_tokens is its default.
  const json reply = s.post_json("/v1/chat/completions",
                                 {{"model", "org/tiny:F16"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(reply["usage"]["completion_tokens"], 3) << reply.dump();
  EXPECT_EQ(reply["model"], "org/tiny:F16");
  // A request's own field wins over the default.
  const json own = s.post_json("/v1/completions", {{"model", "tiny"}, {"prompt", "Once"}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(own["usage"]["completion_tokens"], 5);
  // Its context is its own 512, not the server's 256.
  expect_error(s.post("/v1/completions", {{"model", "tiny"}, {"prompt", "Once"}, {"max_tokens", 600}}), 400,
               "context of 512 tokens");
  const json r = s.get("/v1/resources");
  for (const json& e : r["models"]) {
    if (e["id"] == "tiny:chat") EXPECT_EQ(e["batch"]["sequences"], 2) << e.dump();
  }
  // keep_alive 0: unloaded once its request is done, while the flags'
  // default (5m) keeps the others.
  (void)s.post_json("/v1/completions", {{"model", "brief"}, {"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_TRUE(s.until([&] { return s.model("brief")["state"] == "unloaded"; }));
  EXPECT_EQ(s.model("tiny:chat")["state"], "loaded");
  s.post_json("/v1/models/unload", {{"model", "tiny"}});
  s.expect_clean();
}

// SIGHUP reads the file again: an alias changed, a model added, one removed;
// a mistake keeps what was there. A file dropped into --models-dir after
// the start is found by the first request for it.
// inotify: a file put into the folder or taken out of it is seen as it
// happens, with no request for it and no SIGHUP.
// A thinking template's switch as a model's default: each API's request that
// leaves it out gets it, and one that sets its own wins.
TEST(ServeConfig, AModelsThinkingDefaultReachesEveryApi) {
  const std::string model = temp_path("thinking.gguf");
  const Result made = run("make-test-model --out " + model + " --vocab bpe --embd 64 --layers 1 --type q8_0 --chat-template Qwen-Qwen3-0.6B");
  ASSERT_EQ(made.status, 0) << made.out << made.err;
  const std::string path = temp_path("thinking.toml");
  std::ofstream(path) << "[models.qwen3]\npath = \"" + model + "\"\n"
                         "[models.qwen3.defaults]\nchat_template_kwargs = { enable_thinking = false }\n";
  Served s({"--config", path}, false);
  const json messages = {{{"role", "user"}, {"content", "What is today?"}}};
  // Qwen3's template closes an empty thought when thinking is off.
  const std::string off = "<think>\n\n</think>\n\n";
  auto ends_with = [](const std::string& text, const std::string& end) {
    return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
  };
  const std::string by_default = s.post_json("/apply-template", {{"messages", messages}})["prompt"];
  EXPECT_TRUE(ends_with(by_default, off)) << by_default;
  const std::string own = s.post_json("/apply-template", {{"messages", messages},
                                                          {"chat_template_kwargs", {{"enable_thinking", true}}}})["prompt"];
  EXPECT_FALSE(ends_with(own, off)) << own;
  // Ollama's think: left out, the default; given, its own. The closed
  // thought is in the prompt's count.
  const json ollama = {{"model", "qwen3"}, {"messages", messages}, {"stream", false}, {"options", {{"num_predict", 1}}}};
  json thinking = ollama;
  thinking["think"] = true;
  const int closed = s.post_json("/api/chat", ollama)["prompt_eval_count"];
  const int open = s.post_json("/api/chat", thinking)["prompt_eval_count"];
  EXPECT_GT(closed, open);
  s.post_json("/v1/models/unload", {{"model", "qwen3"}});
  s.expect_clean();
}

TEST(ServeConfig, AFileAddedToOrRemovedFromTheFolderIsSeenAtOnce) {
  const std::string dir = temp_path("watched-folder");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(spm(), dir + "/first.gguf");
  Served s({"--models-dir", dir});
  EXPECT_FALSE(s.model("first").is_null());
  EXPECT_TRUE(s.model("second").is_null());
  // Written elsewhere and renamed into place, as a download is.
  std::filesystem::copy_file(bpe(), dir + "/.second.part");
  std::filesystem::rename(dir + "/.second.part", dir + "/second.gguf");
  ASSERT_TRUE(s.logged("--models-dir: 1 models added, 0 removed"));
  EXPECT_EQ(s.model("second")["state"], "unloaded");
  // Copied in place: seen once it is written whole.
  std::filesystem::copy_file(spm(), dir + "/third.gguf");
  ASSERT_TRUE(s.until([&] { return !s.model("third").is_null(); }));
  (void)s.post_json("/v1/completions", {{"model", "third"}, {"prompt", "Once"}, {"max_tokens", 2}});
  std::filesystem::remove(dir + "/second.gguf");
  ASSERT_TRUE(s.until([&] { return s.model("second").is_null(); }));
  EXPECT_FALSE(s.model("third").is_null());
  // A file that is not a model changes nothing.
  { std::ofstream(dir + "/notes.txt") << "x"; }
  s.post_json("/v1/models/unload", {{"model", "third"}});
  s.expect_clean();
  // The watch and the signal fd go with the server.
  Result end = s.stop();
  EXPECT_EQ(end.status, 0) << end.err;
  EXPECT_NE(end.err.find("ledger: 0 entries"), std::string::npos) << end.err;
}

// A model's own folder (llama-server's router's layout), made in the folder
// and filled, or filled elsewhere and moved in whole, is seen as it happens,
// as its file's removal is; no request names it first.
TEST(ServeConfig, AModelsFolderMadeOrMovedIntoTheFolderIsSeenAtOnce) {
  namespace fs = std::filesystem;
  const std::string dir = temp_path("watched-model-folders");
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(spm(), dir + "/first.gguf");
  Served s({"--models-dir", dir});
  fs::create_directories(dir + "/made");
  fs::copy_file(spm(), dir + "/made/model-q8_0.gguf");
  ASSERT_TRUE(s.until([&] { return !s.model("made").is_null(); })) << s.log();
  const std::string away = temp_path("model-folder-away");
  fs::remove_all(away);
  fs::create_directories(away);
  fs::copy_file(bpe(), away + "/model.gguf");
  fs::rename(away, dir + "/moved");
  ASSERT_TRUE(s.until([&] { return !s.model("moved").is_null(); })) << s.log();
  (void)s.post_json("/v1/completions", {{"model", "moved"}, {"prompt", "Once"}, {"max_tokens", 2}});
  fs::remove(dir + "/made/model-q8_0.gguf");
  ASSERT_TRUE(s.until([&] { return s.model("made").is_null(); })) << s.log();
  EXPECT_FALSE(s.model("moved").is_null());
  s.post_json("/v1/models/unload", {{"model", "moved"}});
  s.expect_clean();
  fs::remove_all(dir);
}

// The residue /v1/resources shows is the process's, not the answer's own:
// with hundreds of models, the JSON that lists them is most of a MiB.
TEST(ServeConfig, AFolderOfManyModelsLeavesNoResidueInTheAnswerThatListsThem) {
  const std::string dir = temp_path("many-models");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 300; ++i) std::filesystem::create_symlink(spm(), dir + "/m" + std::to_string(i) + ".gguf");
  Served s({"--models-dir", dir, "--trust-models"});
  const json r = s.get("/v1/resources");
  ASSERT_EQ(r["models"].size(), 302u);
  EXPECT_LE(r["residue"]["heap_in_use"].get<int64_t>(), 128 << 10) << r["residue"].dump();
  EXPECT_EQ(r["residue_verdict"]["verdict"], "clean") << r["residue_verdict"].dump();
}

TEST(ServeConfig, SighupReloadsAndAFolderIsLookedAtAgain) {
  const std::string dir = temp_path("reload-folder");
  std::filesystem::create_directories(dir);
  const std::string one = "[models.one]\npath = \"" + spm() + "\"\n";
  const std::string path = write_config("reload.toml", one + "aliases = [\"first\"]\n");
  Served s({"--config", path, "--models-dir", dir});
  (void)s.post_json("/v1/completions", {{"model", "first"}, {"prompt", "Once"}, {"max_tokens", 2}});

  write_config("reload.toml", one + "aliases = [\"uno\"]\n[models.two]\npath = \"" + bpe() + "\"\npreload = true\n");
  s.signal(SIGHUP);
  ASSERT_TRUE(s.logged("SIGHUP: reloaded: 1 models added, 1 changed, 0 removed"));
  // A new model with preload is loaded as at start-up, before any request.
  ASSERT_TRUE(s.logged("SIGHUP: preloaded 'two'"));
  EXPECT_EQ(s.model("two")["state"], "loaded");
  // An alias needs no reload: the loaded model takes it at once.
  EXPECT_EQ(s.model("one")["state"], "loaded");
  (void)s.post_json("/v1/completions", {{"model", "uno"}, {"prompt", "Once"}, {"max_tokens", 2}});
  (void)s.post_json("/v1/completions", {{"model", "two"}, {"prompt", "Once"}, {"max_tokens", 2}});
  expect_error(s.post("/v1/completions", {{"model", "first"}, {"prompt", "Once"}}), 404, "'first'");

  // A context of its own: a reload, once it is idle.
  write_config("reload.toml", one + "ctx = 512\n");
  s.signal(SIGHUP);
  ASSERT_TRUE(s.logged("SIGHUP: reloaded: 0 models added, 1 changed, 1 removed"));
  EXPECT_TRUE(s.until([&] { return s.model("one")["state"] == "unloaded" && s.model("two").is_null(); }));
  expect_error(s.post("/v1/completions", {{"model", "one"}, {"prompt", "Once"}, {"max_tokens", 600}}), 400,
               "context of 512 tokens");

  write_config("reload.toml", one + "ctx = \"big\"\n");
  s.signal(SIGHUP);
  ASSERT_TRUE(s.logged("SIGHUP: kept the settings before: " + path + ":3: models.one.ctx: must be an integer"));
  expect_error(s.post("/v1/completions", {{"model", "one"}, {"prompt", "Once"}, {"max_tokens", 600}}), 400,
               "context of 512 tokens");

  // Found on the first request for it.
  std::filesystem::copy_file(spm(), dir + "/late.gguf");
  (void)s.post_json("/v1/completions", {{"model", "late"}, {"prompt", "Once"}, {"max_tokens", 2}});
  for (const char* m : {"one", "late"}) s.post_json("/v1/models/unload", {{"model", m}});
  s.expect_clean();
}
