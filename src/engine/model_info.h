// What a GGUF model is, and what it will take, known before it is loaded.
//
// The estimate loads the model with llama.cpp's no_alloc parameter (metadata
// only, allocations simulated) and creates a context on it the same way, so a
// caller can refuse a load that would not fit before a byte is allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <llama.h>

#include "engine/owners.h"

namespace reclaim {

struct ModelInfo {
  std::string path;
  std::string architecture;
  std::string name;
  std::string chat_template;  // empty when the model has none
  uint64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  uint64_t file_bytes = 0;
  std::string load_mode;  // set when loaded by Model
  int32_t n_ctx_train = 0, n_layer = 0, n_embd = 0, n_vocab = 0;
  bool has_tokenizer = false;  // false: token ids in and out only (llama.cpp's no_vocab)
  // What a context keeps of a sequence: "kv" (a cell a position),
  // "kv+sliding-window" (some layers keep only the last n_swa positions),
  // "recurrent" (one state a sequence), "hybrid" (kv and recurrent layers).
  std::string memory;
  int32_t n_swa = 0;
  // Whether a sequence can be cut back to a prefix of itself and decoding go
  // on from there (what a prompt cache does with a shared prefix). Not with
  // recurrent state: llama.cpp keeps one state a sequence, not one a
  // position, so only the whole of a sequence can be reused or removed.
  bool can_cut_sequences() const { return memory == "kv" || memory == "kv+sliding-window"; }
};

// Host memory (RAM) and accelerator memory, per part.
struct MemoryEstimate {
  int64_t model_host = 0, model_device = 0;      // weights (file-backed when mmap'd)
  int64_t context_host = 0, context_device = 0;  // KV cache and other per-context state
  int64_t compute_host = 0, compute_device = 0;  // graph buffers
  // Heap that llama.cpp's bookkeeping takes, outside the buffers above: the
  // vocab and metadata of the model; the graph scheduler's tables of a
  // context (measured: 20 MiB for a 2-layer model at n_ubatch 256).
  int64_t model_overhead = 0, context_overhead = 0;
  bool exact = false;  // from llama.cpp's own simulated allocation, not a formula
  // The device bytes above by accelerator, by place name ("vulkan0",
  // engine/devices.h): what a budget for each device counts.
  std::map<std::string, int64_t> device_by_name;
  int64_t host() const { return model_host + context_host + compute_host + model_overhead + context_overhead; }
  int64_t device() const { return model_device + context_device + compute_device; }
  // What one more context of the same size takes.
  int64_t per_context_host() const { return context_host + compute_host + context_overhead; }
};

// Reads the metadata of an already loaded model.
ModelInfo model_info(const llama_model* model, const std::string& path);

// Loads `load.path` with no_alloc and estimates a model plus one context of
// `params`. The simulated load allocates only the bookkeeping, which is
// measured as the overheads. Throws Error for a file llama.cpp cannot read.
// `made`, if given, is called with the estimate before the simulated model
// and context are freed: a process about to exit (the vetting child) can say
// it then, and not after the frees (~50 ms for a 151,936-token vocab; time
// them with `reclaim __vet` and the part "estimate").
MemoryEstimate estimate_memory(const ModelLoad& load, const llama_context_params& params, ModelInfo* info = nullptr,
                               const std::function<void(const MemoryEstimate&)>& made = nullptr);

// Throws Error if `e` needs more host memory than the machine has available
// (MemAvailable), or more on the accelerators than they have free; the
// message names both figures.
void check_memory_fits(const MemoryEstimate& e, const std::string& what);

}  // namespace reclaim
