// The stores of other tools read as their tools lay them out: the names
// each gives, what Ollama's layers say, and what is skipped, with why.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "runtime/stores/model_stores.h"
#include "store_layouts.h"
#include "temp_path.h"

using namespace reclaim;
using namespace reclaim::testing;
using nlohmann::json;

namespace {

const StoreModel* named(const std::vector<StoreModel>& models, const std::string& name) {
  const auto it = std::find_if(models.begin(), models.end(), [&](const StoreModel& m) { return m.name == name; });
  return it == models.end() ? nullptr : &*it;
}

bool says(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

const std::string kRev = "0123456789abcdef0123456789abcdef01234567";

}  // namespace

TEST(ModelStores, OllamasNamesLayersAndWhatItSkips) {
  const std::string root = temp_path("ollama-store");
  add_ollama_model(root, "registry.ollama.ai/library/qwen2.5/latest",
                   {{"model", "GGUF-a"},
                    {"template", "{{ .Prompt }}"},
                    {"params", R"({"stop":["<|im_end|>"],"temperature":0.7,"num_ctx":8192})"},
                    {"system", "You are terse."},
                    {"license", "Apache"}});
  add_ollama_model(root, "registry.ollama.ai/library/qwen2.5/7b", {{"model", "GGUF-b"}});
  add_ollama_model(root, "registry.ollama.ai/someone/tiny/q8", {{"model", "GGUF-c"}, {"projector", "MMPROJ"}});
  add_ollama_model(root, "hf.co/org/repo/Q4_K_M", {{"model", "GGUF-d"}});
  add_ollama_model(root, "registry.ollama.ai/library/lora/latest", {{"model", "GGUF-e"}, {"adapter", "LORA"}});
  add_ollama_model(root, "registry.ollama.ai/library/gone/latest", {{"model", "GGUF-f"}});
  std::filesystem::remove(root + "/blobs/sha256-" + sha256_hex("GGUF-f"));  // a pull that never finished
  write_bytes(root + "/manifests/registry.ollama.ai/library/broken/latest", "{not json");
  write_bytes(root + "/manifests/registry.ollama.ai/library/escape/latest",
              R"({"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:../../etc/passwd"}]})");

  std::vector<std::string> skipped;
  const std::vector<StoreModel> got = scan_store({StoreKind::ollama, root}, skipped);
  ASSERT_EQ(got.size(), 4u) << joined(skipped);
  const StoreModel* latest = named(got, "qwen2.5:latest");
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->aliases, std::vector<std::string>{"qwen2.5"});
  EXPECT_EQ(latest->path, root + "/blobs/sha256-" + sha256_hex("GGUF-a"));
  EXPECT_EQ(latest->params["stop"], json::array({"<|im_end|>"}));
  EXPECT_EQ(latest->params["num_ctx"], 8192);
  EXPECT_EQ(latest->system, "You are terse.");
  EXPECT_TRUE(latest->projector.empty());
  ASSERT_TRUE(named(got, "qwen2.5:7b"));
  EXPECT_TRUE(named(got, "qwen2.5:7b")->aliases.empty());
  ASSERT_TRUE(named(got, "someone/tiny:q8"));
  EXPECT_EQ(named(got, "someone/tiny:q8")->projector, root + "/blobs/sha256-" + sha256_hex("MMPROJ"));
  EXPECT_TRUE(named(got, "hf.co/org/repo:Q4_K_M"));
  EXPECT_TRUE(says(skipped, "lora:latest: it has a LoRA adapter")) << joined(skipped);
  EXPECT_TRUE(says(skipped, "gone:latest: its model blob")) << joined(skipped);
  EXPECT_TRUE(says(skipped, "broken:latest")) << joined(skipped);
  EXPECT_TRUE(says(skipped, "escape:latest: a application/vnd.ollama.image.model layer has no sha256 digest")) << joined(skipped);

  // A tag pulled later changes the stamp; reading again does not.
  const std::string before = store_stamp({StoreKind::ollama, root});
  EXPECT_EQ(store_stamp({StoreKind::ollama, root}), before);
  add_ollama_model(root, "registry.ollama.ai/library/qwen2.5/3b", {{"model", "GGUF-g"}});
  EXPECT_NE(store_stamp({StoreKind::ollama, root}), before);
  EXPECT_TRUE(scan_store({StoreKind::ollama, temp_path("no-such-store")}, skipped).empty());
}

TEST(ModelStores, TheHuggingFaceCacheAsLlamaCppsHfNamesIt) {
  const std::string root = temp_path("hf-hub");
  add_hf_file(root, "Qwen/Qwen2.5-0.5B-Instruct-GGUF", kRev, "qwen2.5-0.5b-instruct-q4_k_m.gguf", "A");
  add_hf_file(root, "Qwen/Qwen2.5-0.5B-Instruct-GGUF", kRev, "qwen2.5-0.5b-instruct-q8_0.gguf", "B");
  add_hf_file(root, "Qwen/Qwen2.5-0.5B-Instruct-GGUF", kRev, "README.md", "text");
  add_hf_file(root, "ggml-org/one", kRev, "sub/model-F16.gguf", "C");
  add_hf_file(root, "ggml-org/one", kRev, "mmproj-model-f16.gguf", "P");
  add_hf_file(root, "org/split", kRev, "big-Q4_K_M-00001-of-00002.gguf", "S1");
  add_hf_file(root, "org/split", kRev, "big-Q4_K_M-00002-of-00002.gguf", "S2");
  add_hf_file(root, "org/torn", kRev, "big-Q8_0-00001-of-00003.gguf", "T1");
  add_hf_file(root, "org/torn", kRev, "big-Q8_0-00003-of-00003.gguf", "T3");
  // An older snapshot that refs/main no longer names.
  add_hf_file(root, "org/moved", "1111111111111111111111111111111111111111", "old-Q2_K.gguf", "O");
  add_hf_file(root, "org/moved", kRev, "new-Q6_K.gguf", "N");
  std::filesystem::create_directories(root + "/datasets--org--data/snapshots/" + kRev);

  std::vector<std::string> skipped;
  const std::vector<StoreModel> got = scan_store({StoreKind::hf, root}, skipped);
  std::string names;
  for (const StoreModel& m : got) names += m.name + " ";
  EXPECT_EQ(got.size(), 5u) << names << "\n" << joined(skipped);
  ASSERT_TRUE(named(got, "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M")) << names;
  EXPECT_TRUE(named(got, "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M")->aliases.empty());  // two quantizations: no bare name
  ASSERT_TRUE(named(got, "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q8_0")) << names;
  EXPECT_EQ(read_bytes(named(got, "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q8_0")->path), "B");  // through the link
  const StoreModel* one = named(got, "ggml-org/one:F16");
  ASSERT_TRUE(one) << names;
  EXPECT_EQ(one->aliases, std::vector<std::string>{"ggml-org/one"});
  EXPECT_EQ(read_bytes(one->projector), "P");
  const StoreModel* split = named(got, "org/split:Q4_K_M");
  ASSERT_TRUE(split) << names;
  EXPECT_EQ(read_bytes(split->path), "S1");
  EXPECT_FALSE(named(got, "org/torn:Q8_0"));
  EXPECT_TRUE(says(skipped, "2 of its 3 parts")) << joined(skipped);
  ASSERT_TRUE(named(got, "org/moved:Q6_K")) << names;
  EXPECT_FALSE(named(got, "org/moved:Q2_K"));
}

TEST(ModelStores, LmStudiosFoldersByPublisherRepoAndFile) {
  const std::string root = temp_path("lmstudio");
  write_bytes(root + "/lmstudio-community/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf", "A");
  write_bytes(root + "/lmstudio-community/Qwen2.5-7B-Instruct-GGUF/mmproj-model-f16.gguf", "P");
  write_bytes(root + "/bartowski/big-GGUF/big-Q8_0-00001-of-00002.gguf", "S1");
  write_bytes(root + "/bartowski/big-GGUF/big-Q8_0-00002-of-00002.gguf", "S2");
  write_bytes(root + "/bartowski/notes.txt", "x");
  std::vector<std::string> skipped;
  const std::vector<StoreModel> got = scan_store({StoreKind::lmstudio, root}, skipped);
  ASSERT_EQ(got.size(), 2u) << joined(skipped);
  const StoreModel* q = named(got, "lmstudio-community/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M");
  ASSERT_TRUE(q);
  EXPECT_EQ(read_bytes(q->projector), "P");
  const StoreModel* big = named(got, "bartowski/big-GGUF/big-Q8_0");
  ASSERT_TRUE(big);
  EXPECT_EQ(read_bytes(big->path), "S1");
}

TEST(ModelStores, AGgufNameReadAsLlamaCppReadsIt) {
  stores::GgufName n;
  ASSERT_TRUE(stores::parse_gguf_name("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", n));
  EXPECT_EQ(n.tag, "Q4_K_M");
  EXPECT_EQ(n.stem, "Qwen2.5-0.5B-Instruct-Q4_K_M");
  ASSERT_TRUE(stores::parse_gguf_name("Llama-3.2-1B-Instruct.q8_0-00002-of-00004.gguf", n));
  EXPECT_EQ(n.tag, "Q8_0");
  EXPECT_EQ(n.part, 2);
  EXPECT_EQ(n.parts, 4);
  ASSERT_TRUE(stores::parse_gguf_name("model.GGUF", n));
  EXPECT_EQ(n.tag, "");
  EXPECT_FALSE(stores::parse_gguf_name("model.bin", n));
  EXPECT_THROW(store_kind("docker"), Error);
  EXPECT_EQ(store_kind("hf"), StoreKind::hf);
}
