// What the two raw sides share: they are plain llama.cpp programs, so these
// map the audit's options onto llama.cpp's own, nothing of reclaim's.
#pragma once

#include <llama.h>

#include <algorithm>
#include <string>
#include <thread>

#include "audit/cycles.h"
#include "audit/serve_plan.h"
#include "engine/llama_runtime.h"

namespace reclaim::audit {

inline void quiet_log(ggml_log_level, const char*, void*) {}

// A plain program's start: llama.cpp's backend, its log quiet.
inline void start_raw_side(SideResult& out) {
  out.side = "raw";
  out.start_before = Usage::capture();
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  out.warmed = "llama_backend_init";
}

inline llama_load_mode raw_load_mode(const std::string& m) {
  if (m == "none") return LLAMA_LOAD_MODE_NONE;
  if (m == "mlock") return LLAMA_LOAD_MODE_MLOCK;
  if (m == "mmap-mlock") return LLAMA_LOAD_MODE_MMAP_MLOCK;
  return LLAMA_LOAD_MODE_MMAP;
}

// The audit's model, loaded as a plain program loads it.
inline llama_model_params raw_model_params(const CycleOptions& o) {
  llama_model_params mp = llama_model_default_params();
  mp.load_mode = raw_load_mode(o.load_mode);
  mp.n_gpu_layers = o.gpu_layers;
  return mp;
}

// The audit's --threads, or every core, as a plain program would take.
inline int raw_threads(const CycleOptions& o) {
  return o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// A raw run-path request's own context.
inline llama_context_params run_context_params(const CycleOptions& o, int threads) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(o.n_ctx);
  cp.n_batch = cp.n_ubatch = cp.n_ctx;  // the prompt in one decode
  cp.n_threads = cp.n_threads_batch = threads;
  return cp;
}

// The raw serve path's one context: a sequence a request.
inline llama_context_params serve_context_params(const CycleOptions& o, int threads) {
  llama_context_params cp = llama_context_default_params();
  const int n_seq = std::max(1, o.parallel);
  cp.n_ctx = static_cast<uint32_t>(o.n_ctx * n_seq);
  // A group's prompts go in one llama_decode, which splits them into steps
  // of the size reclaim's batch has.
  cp.n_batch = static_cast<uint32_t>(o.n_ctx);
  cp.n_ubatch = kServeStepTokens;
  cp.n_seq_max = static_cast<uint32_t>(n_seq);
  cp.kv_unified = false;
  cp.n_threads = cp.n_threads_batch = threads;
  return cp;
}

}  // namespace reclaim::audit
