// The architectures users run, as small random models that llama.cpp's own
// writer (tests/test-llama-archs.cpp, built by scripts/setup) makes: no
// tokenizer, 128 token ids, so tests drive them with ids.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

namespace reclaim::testing {

struct Arch {
  std::string file;  // in RECLAIM_ARCH_MODELS, without .gguf
  std::string kind;  // what its memory is
};

// One of each kind of memory llama.cpp gives a context: a plain KV cache
// (llama, qwen3), a sliding-window one beside a full one (gemma2), experts
// (qwen3moe), attention beside recurrent state (lfm2, granitehybrid), and
// recurrent state alone (mamba2).
inline const std::vector<Arch>& archs() {
  static const std::vector<Arch> all = {
      {"llama-dense", "kv"},         {"qwen3-dense", "kv"},          {"gemma2-dense", "sliding-window kv"},
      {"qwen3moe-moe", "kv, experts"}, {"lfm2-dense", "hybrid"}, {"granitehybrid-dense", "hybrid"},
      {"mamba2-dense", "recurrent"},
  };
  return all;
}

inline void PrintTo(const Arch& a, std::ostream* os) { *os << a.file; }

inline std::string arch_model(const std::string& file) {
  const std::string path = std::string(RECLAIM_ARCH_MODELS) + "/" + file + ".gguf";
  if (::access(path.c_str(), R_OK) != 0) {
    ADD_FAILURE() << "no architecture test model at '" << path << "': run scripts/setup, which writes them";
  }
  return path;
}

inline std::string arch_name(const ::testing::TestParamInfo<Arch>& info) {
  std::string n = info.param.file;
  for (char& c : n) {
    if (c == '-') c = '_';
  }
  return n;
}

}  // namespace reclaim::testing
