// write-hostile-corpus GOOD.gguf DIR: the damaged copies of GOOD that the
// tests use (tests/gguf_corpus.h), as files in DIR; the fuzzer's seeds.
#include <cstdio>
#include <fstream>
#include <string>

#include "gguf_corpus.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s GOOD.gguf DIR\n", argv[0]);
    return 2;
  }
  try {
    int n = 0;
    reclaim::testing::for_each_damage(reclaim::testing::read_bytes(argv[1]), [&](const reclaim::testing::DamagedFile& d) {
      const std::string path = std::string(argv[2]) + "/" + d.name + ".gguf";
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << d.bytes;
      if (!out) throw std::runtime_error("cannot write " + path);
      ++n;
    });
    std::printf("%d damaged copies of %s in %s\n", n, argv[1], argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write-hostile-corpus: %s\n", e.what());
    return 2;
  }
}
