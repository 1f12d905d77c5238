// What the two raw sides share: they are plain llama.cpp programs, so these
// map the audit's options onto llama.cpp's own, nothing of reclaim's.
#pragma once

#include <llama.h>

#include <algorithm>
#include <string>
#include <thread>

#include "audit/cycles.h"

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

// The audit's --threads, or every core, as a plain program would take.
inline int raw_threads(const CycleOptions& o) {
  return o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace reclaim::audit
