// `reclaim serve` over the stores other tools keep, laid out as each tool
// lays them out: each model served and chatted with under its tool's name,
// Ollama's parameters and system message as the model's defaults, a model
// pulled while the server runs found on the first request for it, nothing
// in a store written, and the ledger empty after.
#include <httplib.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "served.h"
#include "store_layouts.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

const std::string kRev = "0123456789abcdef0123456789abcdef01234567";

// Every file under `root` with its size and modification time.
std::map<std::string, std::string> listing(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
                             std::to_string(st.st_mtim.tv_nsec);
  }
  return out;
}

json ask(const std::string& model, const json& messages, int max_tokens = -1) {
  json body = {{"model", model}, {"messages", messages}};
  if (max_tokens >= 0) body["max_tokens"] = max_tokens;
  return body;
}

}  // namespace

TEST(ServeStores, EachStoresModelsAreServedUnderTheirToolsNamesAndNothingThereIsWritten) {
  const std::string ollama = temp_path("ollama"), hf = temp_path("hf"), lms = temp_path("lmstudio");
  add_ollama_model(ollama, "registry.ollama.ai/library/tiny/latest",
                   {{"model", read_bytes(spm())},
                    {"template", "{{ .Prompt }}"},
                    {"params", R"({"temperature":0,"num_predict":3,"stop":["zzz"],"num_ctx":512,"mirostat":2})"},
                    {"system", "You are terse."}});
  add_hf_file(hf, "org/tiny-GGUF", kRev, "tiny-Q8_0.gguf", read_bytes(bpe()));
  // A model in two parts, as gguf-split writes one: served as one.
  const std::string parts = temp_path("split");
  std::filesystem::create_directories(parts);
  const Result split = run("make-test-model --out " + parts + "/big-Q8_0.gguf --vocab bpe --embd 64 --layers 2 --type q8_0 --split 2");
  ASSERT_EQ(split.status, 0) << split.out;
  for (const char* part : {"big-Q8_0-00001-of-00002.gguf", "big-Q8_0-00002-of-00002.gguf"}) {
    add_hf_file(hf, "org/big-GGUF", kRev, part, read_bytes(parts + "/" + part));
  }
  write_bytes(lms + "/pub/tiny-GGUF/tiny-F16.gguf", read_bytes(spm()));
  const auto before = std::make_tuple(listing(ollama), listing(hf), listing(lms));

  Served s({"--models-from", "ollama,hf", "--models-from", "lmstudio", "--ollama-models", ollama, "--hf-cache", hf,
            "--lmstudio-models", lms},
           false);
  for (const char* name : {"tiny:latest", "org/tiny-GGUF:Q8_0", "pub/tiny-GGUF/tiny-F16", "org/big-GGUF:Q8_0"}) {
    EXPECT_FALSE(s.model(name).empty()) << name << " " << s.get("/v1/models").dump();
  }
  const json user = json::array({{{"role", "user"}, {"content", "Hello"}}});
  // Ollama's bare name is its :latest; its parameters are the defaults.
  const json plain = s.post_json("/v1/chat/completions", ask("tiny", user));
  EXPECT_EQ(plain["usage"]["completion_tokens"], 3) << plain.dump();  // num_predict 3
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "length") << plain.dump();
  const json props = s.get("/props?model=tiny:latest");
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 512) << props.dump();
  EXPECT_EQ(props["default_generation_settings"]["params"]["temperature"], 0) << props.dump();
  // The system layer is the system message of a chat that has none.
  json with_system = user;
  with_system.insert(with_system.begin(), json{{"role", "system"}, {"content", "You are terse."}});
  EXPECT_EQ(s.post_json("/v1/chat/completions", ask("tiny", with_system))["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  with_system[0]["content"] = "x";
  EXPECT_LT(s.post_json("/v1/chat/completions", ask("tiny", with_system))["usage"]["prompt_tokens"],
            plain["usage"]["prompt_tokens"]);
  // Ollama's own API, on the same names.
  const json tags = s.get("/api/tags");
  EXPECT_NE(tags.dump().find("\"tiny:latest\""), std::string::npos) << tags.dump();
  const json chat = s.post_json("/api/chat", {{"model", "tiny"}, {"messages", user}, {"stream", false}});
  EXPECT_EQ(chat["done"], true) << chat.dump();

  // A repository of one model answers to the repository's name.
  EXPECT_FALSE(s.post_json("/v1/chat/completions", ask("org/tiny-GGUF", user, 2))["choices"].empty());
  EXPECT_FALSE(s.post_json("/v1/chat/completions", ask("pub/tiny-GGUF/tiny-F16", user, 2))["choices"].empty());
  const json both_parts = s.post_json("/v1/chat/completions", ask("org/big-GGUF:Q8_0", user, 2));
  EXPECT_FALSE(both_parts["choices"].empty()) << both_parts.dump();
  EXPECT_EQ(s.model("org/big-GGUF:Q8_0")["state"], "loaded");

  // Pulled while the server runs: found by the first request for it.
  add_ollama_model(ollama, "registry.ollama.ai/library/later/v1", {{"model", read_bytes(bpe())}});
  const auto after_pull = listing(ollama);
  const json later = s.post_json("/v1/chat/completions", ask("later:v1", user, 2));
  EXPECT_EQ(later["object"], "chat.completion") << later.dump();

  for (const char* m : {"tiny:latest", "org/tiny-GGUF:Q8_0", "pub/tiny-GGUF/tiny-F16", "later:v1", "org/big-GGUF:Q8_0"}) {
    s.post("/v1/models/unload", {{"model", m}});
  }
  s.expect_clean();
  EXPECT_EQ(listing(ollama), after_pull);
  EXPECT_EQ(listing(hf), std::get<1>(before));
  EXPECT_EQ(listing(lms), std::get<2>(before));
}

// A first `reclaim serve` with no model named serves what the machine's
// stores hold, at their default places.
TEST(ServeStores, WithNoModelNamedItServesTheStoresItFinds) {
  const std::string ollama = temp_path("ollama-default"), home = temp_path("empty-home");
  std::filesystem::create_directories(home);
  add_ollama_model(ollama, "registry.ollama.ai/library/tiny/latest", {{"model", read_bytes(spm())}});
  ::setenv("OLLAMA_MODELS", ollama.c_str(), 1);
  ::setenv("HOME", home.c_str(), 1);
  for (const char* v : {"LLAMA_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"}) ::unsetenv(v);
  Served s({}, false);
  const json models = s.get("/v1/models");
  ASSERT_EQ(models["data"].size(), 1u) << models.dump();
  EXPECT_EQ(models["data"][0]["id"], "tiny:latest");
  const json reply = s.post_json("/v1/chat/completions", ask("tiny", json::array({{{"role", "user"}, {"content", "Hi"}}}), 2));
  EXPECT_EQ(reply["object"], "chat.completion") << reply.dump();
  s.post("/v1/models/unload", {{"model", "tiny:latest"}});
  s.expect_clean();
}
