// libFuzzer target: reclaim's GGUF checks and everything the vetting child
// does after them (engine/vet.h: llama.cpp's simulated load and context
// plan, a real load, a decode, the tokenizer), in this process, with ASan and
// leak detection. A crash here is a damage the checks do not name; in the
// product it ends only the vetting child, and it should become a check.
//
// scripts/fuzz builds llama.cpp and this target with clang's sanitizers into
// a cache of their own and runs it; seeds are the hostile corpus
// (tests/gguf_corpus.h) of two small models.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/llama_runtime.h"
#include "engine/session.h"
#include "engine/test_model.h"
#include "engine/vet.h"

namespace {

// The input as a file llama.cpp can open and map, without touching a disk.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(::memfd_create("fuzz.gguf", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

reclaim::VetRequest request(const std::string& path) {
  reclaim::VetRequest q;
  q.path = path;
  q.n_gpu_layers = 0;
  reclaim::SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 64;
  q.context = reclaim::session_context_params(so, 0, 1);
  return q;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // For the life of the process, as in a program.
  static reclaim::Runtime* runtime = new reclaim::Runtime();
  (void)runtime;
  // llama.cpp's one-time state (its unicode tables, ggml's CPU buffer types,
  // the graph caches) is made by a first good load, here, so that leak
  // detection does not count it against the first input.
  char dir[] = "/tmp/reclaim-fuzz.XXXXXX";
  if (!::mkdtemp(dir)) std::abort();
  const std::string path = std::string(dir) + "/warm.gguf";
  reclaim::TestModelSpec spec;
  spec.vocab = "none";
  spec.n_embd = 64;
  spec.n_layer = 1;
  reclaim::make_test_model(spec, path);
  const reclaim::VetReport r = reclaim::vet_here(request(path));
  ::unlink(path.c_str());
  ::rmdir(dir);
  if (!r.ok) {
    std::fprintf(stderr, "fuzz-gguf: the warm-up model did not vet: %s\n", r.error.c_str());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemFile f(data, size);
  (void)reclaim::vet_here(request(f.path()));
  return 0;
}
