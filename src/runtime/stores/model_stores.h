// The models other tools keep, served where they lie and never written:
// Ollama's store (manifests naming content-addressed blobs), the Hugging
// Face hub cache (where huggingface_hub and llama.cpp's -hf download), and
// LM Studio's folders. Each store is read into the models it holds, named
// as its own tool names them; a model the scan cannot take is skipped with
// a line saying why, and the rest are served.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace reclaim {

// `pulled` is reclaim's own (runtime/stores/pull.h), laid out as Ollama's.
enum class StoreKind { pulled, ollama, hf, lmstudio };

struct Store {
  StoreKind kind;
  std::string root;
};

struct StoreModel {
  std::string name;                  // the tool's own name for it
  std::vector<std::string> aliases;  // more names the tool answers to
  std::string path;                  // the GGUF; a split model's first part
  std::string projector;             // its multimodal projector, if the store has one
  // Ollama's params layer as Ollama names them (stop, temperature, num_ctx, ...).
  nlohmann::json params = nlohmann::json::object();
  std::string system;  // Ollama's system layer: the system message a chat without one gets
};

// "pulled", "ollama", "hf" or "lmstudio"; Error for another.
StoreKind store_kind(const std::string& name);
const char* store_name(StoreKind kind);
// Where the tool keeps its models: its environment variable where it has
// one (RECLAIM_MODELS; OLLAMA_MODELS; HF_HUB_CACHE, HF_HOME, ...), else the
// first of its default places that exists, else the first of them.
std::string default_store_root(StoreKind kind);

// The store's models. A root that does not exist holds none. Each model
// skipped is a line in `skipped`.
std::vector<StoreModel> scan_store(const Store& store, std::vector<std::string>& skipped);
// When the store's folders last changed, as one string: equal stamps, the
// same models (a rescan is needed only when it differs).
std::string store_stamp(const Store& store);

namespace stores {
std::vector<StoreModel> scan_ollama(const std::string& root, std::vector<std::string>& skipped);
// Ollama's short name of manifests/HOST/NS/MODEL/TAG: the default registry
// and the library namespace are implied ("qwen2.5:7b"), another namespace
// is kept ("ns/name:tag"), and another host too ("hf.co/org/repo:Q4_K_M").
std::string ollama_name(const std::string& host, const std::string& ns, const std::string& model, const std::string& tag);
std::vector<StoreModel> scan_hf(const std::string& root, std::vector<std::string>& skipped);
std::vector<StoreModel> scan_lmstudio(const std::string& root, std::vector<std::string>& skipped);
// A GGUF file name's parts as llama.cpp's -hf reads them: the name without
// ".gguf" and without a split's "-0000K-of-0000N", its quantization tag (the
// last "-" or "." part, upper case: "Q4_K_M"; empty without one), and the
// split's part and count (1 and 1 when not split). False for a file that
// is not .gguf.
struct GgufName {
  std::string stem, tag;
  int part = 1, parts = 1;
};
bool parse_gguf_name(const std::string& file, GgufName& out);
// A small file's text, at most `limit` bytes (Error beyond, or unreadable).
std::string read_small_file(const std::string& path, size_t limit);
}  // namespace stores

}  // namespace reclaim
