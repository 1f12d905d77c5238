#include "engine/warmup.h"

#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/defer.h"
#include "core/error.h"
#include "engine/placement.h"

namespace reclaim {

namespace {

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest
// are shifted to code points from 256 up.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    unsigned cp = printable ? static_cast<unsigned>(b) : static_cast<unsigned>(256 + shifted++);
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

void warm_tokenizer_tables() {
  gguf_context* g = gguf_init_empty();
  Defer free_gguf([g] { gguf_free(g); });
  gguf_set_val_str(g, "general.architecture", "llama");
  gguf_set_val_u32(g, "llama.context_length", 64);
  gguf_set_val_u32(g, "llama.embedding_length", 64);
  gguf_set_val_u32(g, "llama.block_count", 1);
  gguf_set_val_u32(g, "llama.feed_forward_length", 64);
  gguf_set_val_u32(g, "llama.attention.head_count", 1);
  gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  gguf_set_val_str(g, "tokenizer.ggml.model", "gpt2");
  gguf_set_val_str(g, "tokenizer.ggml.pre", "qwen2");
  std::vector<std::string> tokens = byte_tokens();
  std::vector<const char*> ptrs;
  for (const std::string& t : tokens) ptrs.push_back(t.c_str());
  gguf_set_arr_str(g, "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
  const char* merges[] = {"a b"};
  gguf_set_arr_str(g, "tokenizer.ggml.merges", merges, 1);

  int fd = ::memfd_create("reclaim-warmup.gguf", MFD_CLOEXEC);
  if (fd < 0) throw Error(std::string("memfd_create: ") + std::strerror(errno));
  Defer close_fd([fd] { ::close(fd); });
  std::FILE* f = ::fdopen(::dup(fd), "wb");
  if (!f) throw Error(std::string("fdopen: ") + std::strerror(errno));
  bool ok = gguf_write_to_file_ptr(g, f, /*only_meta=*/false);
  std::fclose(f);
  if (!ok) throw Error("cannot write the warm-up vocab");

  std::string path = "/proc/self/fd/" + std::to_string(fd);
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  mp.load_mode = LLAMA_LOAD_MODE_NONE;
  llama_model* m = llama_model_load_from_file(path.c_str(), mp);
  if (!m) throw Error("llama.cpp refused the warm-up vocab");
  Defer free_model([m] { llama_model_free(m); });
  // Letters, digits, accents, CJK, emoji and whitespace: every class that the
  // pre-tokenizers look up.
  const char* text = "Hello, World 123! Ünïcödé 日本語 🙂\n\tend";
  llama_token out[256];
  (void)llama_tokenize(llama_model_get_vocab(m), text, static_cast<int32_t>(std::strlen(text)), out, 256, true, true);
}

void warm_cpu_buffer_types() { (void)cpu_extra_buffer_types(); }

}  // namespace reclaim
