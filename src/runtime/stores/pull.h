// `reclaim pull NAME` and Ollama's POST /api/pull: a model fetched over the
// registry protocol Ollama's registry and Hugging Face both speak (Docker's
// distribution API: a manifest at /v2/NS/MODEL/manifests/TAG naming blobs
// at /v2/NS/MODEL/blobs/DIGEST), into reclaim's own store, laid out as
// Ollama's (manifests/HOST/NS/MODEL/TAG, blobs/sha256-HEX), which `serve`
// reads as it reads Ollama's. Each blob is written under a partial name,
// checked against its sha256 digest, and renamed into place; the manifest
// is written last, so nothing half-written is ever served. A partial blob
// is continued with a Range request on the next pull.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace reclaim {

// What went wrong, for the command's exit status and the API's answer.
class PullError : public Error {
 public:
  enum class Kind { bad_name, not_found, network, checksum, disk, interrupted };
  PullError(Kind kind, const std::string& what) : Error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A name as the registry reads it. "qwen2.5:7b" is Ollama's library
// (registry.ollama.ai/library/qwen2.5:7b), "hf.co/ORG/REPO:QUANT" Hugging
// Face's (hf.co serves GGUF repositories over the same protocol),
// "HOST/NS/MODEL:TAG" any registry's; the tag is "latest" where none is
// given. "A/B:TAG" is Hugging Face's ORG/REPO where `hf_short_names` (the
// command line's reading, as llama.cpp's -hf), and Ollama's NS/MODEL
// otherwise (Ollama's API's reading, which its clients expect).
struct PullName {
  std::string host, ns, model, tag;
  std::string manifest_path() const { return host + "/" + ns + "/" + model + "/" + tag; }
};
PullName parse_pull_name(const std::string& name, bool hf_short_names = true);  // PullError bad_name

struct PullProgress {
  std::string status;  // "pulling manifest", "pulling DIGEST", "verifying sha256 digest", "writing manifest", "success"
  std::string digest;
  int64_t total = 0, completed = 0;
};

struct PullOptions {
  std::string store;      // reclaim's store (pulled_store_root())
  bool insecure = false;  // plain http:// to the registry (a mirror on the local network, a test's)
  bool hf_short_names = true;  // parse_pull_name's
  std::function<void(const PullProgress&)> progress;
  std::function<bool()> cancelled;  // polled as bytes come
  // A transfer that brings fewer than kMinStallBytes in this long is
  // dropped as stalled (a partial blob stays, for the next pull to go on
  // from): a registry that trickles a byte a minute would hold the pull, and
  // a server's one pull at a time, for ever.
  std::chrono::seconds stall{60};
};

inline constexpr int64_t kMinStallBytes = 64 << 10;

struct PullResult {
  std::string manifest;  // its path in the store
  int64_t bytes = 0;     // the model's, all layers
  int64_t fetched = 0;   // of them, what came over the network this time
};

// Ends by removing the store's blobs no manifest names (a tag's old model's
// among them), unless a pull in another process is under way.
PullResult pull_model(const std::string& name, const PullOptions& options);

// Removes a pulled model's manifest, and every blob of the store no other
// manifest names (once pulls in other processes have written theirs).
// False when the store has no such model.
bool delete_pulled(const std::string& store, const std::string& name, bool hf_short_names = true);

// $RECLAIM_MODELS, else $XDG_DATA_HOME/reclaim/models, else
// ~/.local/share/reclaim/models.
std::string pulled_store_root();

}  // namespace reclaim
