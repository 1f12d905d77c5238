// The models the benchmarks use when given none: the cached bpe test model,
// or a 300 MiB test model of another vocabulary, made once in the cache.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/size.h"
#include "engine/test_model.h"

namespace reclaim::bench {

inline std::string model_or_made(const std::string& given, const std::string& vocab, const char* who) {
  if (!given.empty()) return given;
  if (vocab == "bpe") return default_test_model();
  const std::string path = cache_dir() + "/models/test-" + vocab + "-300MiB-f16-s1.gguf";
  if (::access(path.c_str(), R_OK) == 0) return path;
  TestModelSpec spec;
  spec.vocab = vocab;
  spec.size = parse_size("300MiB");
  std::fprintf(stderr, "%s: making %s (once)\n", who, path.c_str());
  make_test_model(spec, path);
  return path;
}

}  // namespace reclaim::bench
