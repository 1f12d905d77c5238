// What the two raw sides share: they are plain llama.cpp programs, so these
// map the audit's options onto llama.cpp's own, nothing of reclaim's.
#pragma once

#include <llama.h>

#include <string>

namespace reclaim::audit {

inline void quiet_log(ggml_log_level, const char*, void*) {}

inline llama_load_mode raw_load_mode(const std::string& m) {
  if (m == "none") return LLAMA_LOAD_MODE_NONE;
  if (m == "mlock") return LLAMA_LOAD_MODE_MLOCK;
  if (m == "mmap-mlock") return LLAMA_LOAD_MODE_MMAP_MLOCK;
  return LLAMA_LOAD_MODE_MMAP;
}

}  // namespace reclaim::audit
