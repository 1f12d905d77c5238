#include "engine/model_info.h"

#include <sys/stat.h>

#include <algorithm>

#include <ggml-backend.h>

#include "core/defer.h"
#include "core/heap.h"
#include "core/size.h"
#include "core/usage.h"
#include "engine/device_life.h"
#include "engine/devices.h"
#include "engine/ggml_buffers.h"
#include "engine/placement.h"
#include "engine/projector.h"
#include "engine/llama_runtime.h"

// llama_get_memory_breakdown lives in llama.cpp's staging header, which is
// not installed; set-up points RECLAIM_LLAMA_EXT_HEADER at the pinned source.
#ifdef RECLAIM_LLAMA_EXT_HEADER
#define RECLAIM_HAVE_LLAMA_EXT 1
#include RECLAIM_LLAMA_EXT_HEADER
#else
#define RECLAIM_HAVE_LLAMA_EXT 0
#endif

namespace reclaim {

namespace {

std::string meta(const llama_model* m, const char* key) {
  char buf[512];
  int32_t n = llama_model_meta_val_str(m, key, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(std::min<int32_t>(n, sizeof buf - 1)));
}

}  // namespace

ModelInfo model_info(const llama_model* model, const std::string& path) {
  ModelInfo i;
  i.path = path;
  i.architecture = meta(model, "general.architecture");
  i.name = meta(model, "general.name");
  if (const char* t = llama_model_chat_template(model, nullptr)) i.chat_template = t;
  i.n_params = llama_model_n_params(model);
  i.tensor_bytes = llama_model_size(model);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) i.file_bytes = static_cast<uint64_t>(st.st_size);
  i.n_ctx_train = llama_model_n_ctx_train(model);
  i.n_layer = llama_model_n_layer(model);
  i.n_embd = llama_model_n_embd(model);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  i.n_vocab = llama_vocab_n_tokens(vocab);
  i.has_tokenizer = llama_vocab_type(vocab) != LLAMA_VOCAB_TYPE_NONE;
  i.n_swa = llama_model_n_swa(model);
  if (llama_model_is_hybrid(model)) {
    i.memory = "hybrid";
  } else if (llama_model_is_recurrent(model)) {
    i.memory = "recurrent";
  } else {
    i.memory = i.n_swa > 0 ? "kv+sliding-window" : "kv";
  }
  return i;
}

namespace {

// The rows a context is primed to beyond the n_seq_max that the planned
// context's heap already counts: they are not in llama.cpp's memory
// breakdown.
int64_t output_rows_growth(const llama_model* model, const llama_context_params& p) {
  const int64_t rows = primed_output_rows(p);
  if (rows <= static_cast<int64_t>(p.n_seq_max)) return 0;
  int64_t per_row = static_cast<int64_t>(llama_vocab_n_tokens(llama_model_get_vocab(model))) * sizeof(float);
  if (p.embeddings) per_row += static_cast<int64_t>(llama_model_n_embd_out(model)) * sizeof(float);
  return (rows - p.n_seq_max) * per_row;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelLoad& load, const llama_context_params& params, ModelInfo* info,
                               const std::function<void(const MemoryEstimate&)>& made) {
  check_model_file(load.path);
  const DeviceHold device = hold_devices();
  // The simulated load reads the whole vocab (tens of MiB for 151,936
  // tokens), in an arena that goes with the model; what else it freed goes
  // back to the OS too, after the frees below.
  Defer trim([] { release_free_heap(); });
  llama_model_params mp = llama_model_default_params();
  mp.no_alloc = true;
  mp.load_mode = LLAMA_LOAD_MODE_NONE;  // llama.cpp asserts on no_alloc with mmap
  mp.n_gpu_layers = load.n_gpu_layers;
  take_llama_errors();
  auto heap_in_use = [] { return static_cast<int64_t>(heap_stats().in_use); };
  const int64_t heap_before_model = heap_in_use();
  llama_model* model = load_in_arena(load.path, mp);
  if (!model) {
    std::string why = take_llama_errors();
    throw Error("cannot read model '" + load.path + "': " + (why.empty() ? "llama.cpp gave no reason" : why));
  }
  Defer free_model([model] { llama_model_free(model); });
  MemoryEstimate e;
  e.model_overhead = std::max<int64_t>(0, heap_in_use() - heap_before_model);
  if (info) *info = model_info(model, load.path);
#if RECLAIM_HAVE_LLAMA_EXT
  const int64_t heap_before_ctx = heap_in_use();
  llama_context* ctx = llama_init_from_model(model, params);
  if (!ctx) {
    std::string why = take_llama_errors();
    throw Error("cannot plan a context of " + std::to_string(params.n_ctx) + " tokens for '" + load.path +
                "': " + (why.empty() ? "llama.cpp gave no reason" : why));
  }
  Defer free_ctx([ctx] { llama_free(ctx); });
  e.context_overhead = std::max<int64_t>(0, heap_in_use() - heap_before_ctx);
  const bool mapped = maps_file(load.mode);
  for (const auto& [buft, mb] : llama_get_memory_breakdown(ctx)) {
    const std::string place = place_of(buft);
    const bool host = place == kHostMemory;
    // A mapped model's weights in such a type are a copy besides the
    // mapping, which the load's heap counts (and the ledger with it).
    // Without a mapping, the weights the CPU holds are that heap, and only
    // its rounding (huge pages) is more than the tensors.
    const bool cpu_heap = buft == ggml_backend_cpu_buffer_type() || is_cpu_extra_buffer_type(buft);
    if (mapped && is_cpu_extra_buffer_type(buft)) {
      e.model_overhead += static_cast<int64_t>(ggml_cpu_buffer_footprint(mb.model));
    } else if (!mapped && cpu_heap) {
      e.model_overhead += static_cast<int64_t>(ggml_cpu_buffer_footprint(mb.model) - mb.model);
    }
    (host ? e.model_host : e.model_device) += static_cast<int64_t>(mb.model);
    (host ? e.context_host : e.context_device) += static_cast<int64_t>(mb.context);
    (host ? e.compute_host : e.compute_device) += static_cast<int64_t>(mb.compute);
    if (!host) e.device_by_name[place] += static_cast<int64_t>(mb.total());
  }
  e.exact = true;
#else
  // Without llama.cpp's staging header: tensors, plus an f16 KV cache.
  e.model_host = static_cast<int64_t>(llama_model_size(model));
  const int64_t n_ctx = params.n_ctx ? params.n_ctx : llama_model_n_ctx_train(model);
  const int64_t head_dim = llama_model_n_embd(model) / std::max(1, llama_model_n_head(model));
  e.context_host = n_ctx * llama_model_n_layer(model) * 2 * head_dim * llama_model_n_head_kv(model) * 2;
#endif
  e.context_host += output_rows_growth(model, params);
  if (made) made(e);
  // After `made`: a vetting child names the projector's stage apart.
  if (!load.mmproj.empty()) add_projector_estimate(e, load.mmproj, load.n_gpu_layers);
  return e;
}

void check_memory_fits(const MemoryEstimate& e, const std::string& what) {
  const int64_t avail = memory_available();
  if (avail >= 0 && e.host() > avail) {
    throw Error(what + " needs about " + format_bytes(e.host()) + " of memory and " + format_bytes(avail) +
                " is available");
  }
  if (e.device() > 0) {
    const DeviceHold device = hold_devices();
    int64_t free_total = 0;
    for (ggml_backend_dev_t dev : accelerator_devices()) {
      size_t free = 0, total = 0;
      ggml_backend_dev_memory(dev, &free, &total);
      free_total += static_cast<int64_t>(free);
    }
    if (e.device() > free_total) {
      throw Error(what + " needs about " + format_bytes(e.device()) + " of accelerator memory and " +
                  format_bytes(free_total) + " is free");
    }
  }
}

}  // namespace reclaim
