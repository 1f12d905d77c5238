#include "engine/test_model.h"

#include <ggml.h>
#include <gguf.h>
#include <llama.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/defer.h"
#include "core/error.h"
#include "core/size.h"

#ifndef RECLAIM_LLAMA_VOCAB_DIR
#define RECLAIM_LLAMA_VOCAB_DIR ""
#endif

namespace reclaim {

namespace {

struct GgufDeleter {
  void operator()(gguf_context* g) const { gguf_free(g); }
};
using GgufPtr = std::unique_ptr<gguf_context, GgufDeleter>;
struct GgmlDeleter {
  void operator()(ggml_context* c) const { ggml_free(c); }
};
using GgmlPtr = std::unique_ptr<ggml_context, GgmlDeleter>;

GgufPtr open_vocab(const std::string& path) {
  gguf_init_params params{/*no_alloc=*/true, /*ctx=*/nullptr};
  GgufPtr g(gguf_init_from_file(path.c_str(), params));
  if (!g) throw Error("vocab file '" + path + "' is not a readable GGUF file");
  if (gguf_find_key(g.get(), "tokenizer.ggml.tokens") < 0) {
    throw Error("vocab file '" + path + "' has no tokenizer.ggml.tokens");
  }
  return g;
}

ggml_type type_from_name(const std::string& t) {
  if (t == "f32") return GGML_TYPE_F32;
  if (t == "f16") return GGML_TYPE_F16;
  if (t == "q8_0") return GGML_TYPE_Q8_0;
  throw Error("unknown tensor type '" + t + "' (use f32, f16 or q8_0)");
}

double bytes_per_weight(ggml_type t) {
  return static_cast<double>(ggml_type_size(t)) / static_cast<double>(ggml_blck_size(t));
}

int64_t shape_bytes(const TestModelShape& s, ggml_type t) {
  int64_t head_dim = s.n_embd / s.n_head;
  int64_t kv = head_dim * s.n_head_kv;
  double w = bytes_per_weight(t);
  double emb = 2.0 * static_cast<double>(s.n_vocab * s.n_embd) * w;  // token_embd + output
  double layer = (2.0 * s.n_embd * s.n_embd + 2.0 * s.n_embd * kv + 3.0 * s.n_embd * s.n_ff) * w + 2.0 * 4 * s.n_embd;
  return static_cast<int64_t>(emb + layer * static_cast<double>(s.n_layer) + 4.0 * s.n_embd);
}

void fill_heads(TestModelShape& s) {
  s.n_head = std::max<int64_t>(1, s.n_embd / 64);
  s.n_head_kv = s.n_head % 4 == 0 ? s.n_head / 4 : s.n_head;  // grouped-query attention, as real llamas
}

// splitmix64: tiny, fast, and the same on every platform.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }
};

uint64_t hash_name(const char* name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  return h;
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (std::fwrite(data, 1, n, f) != n) throw Error("cannot write '" + path + "': " + std::strerror(errno));
}

}  // namespace

std::string llama_template(const std::string& name) {
  const char* env = std::getenv("RECLAIM_VOCAB_DIR");
  const std::string dir = env && *env ? env : RECLAIM_LLAMA_VOCAB_DIR;
  if (dir.empty() || name.empty() || name.find('/') != std::string::npos) return {};
  std::FILE* f = std::fopen((dir + "/templates/" + name + ".jinja").c_str(), "rb");
  if (!f) return {};
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

std::string vocab_file(const std::string& vocab) {
  if (vocab == "none") return {};
  std::string file;
  if (vocab == "spm") file = "ggml-vocab-llama-spm.gguf";
  else if (vocab == "bpe") file = "ggml-vocab-qwen2.gguf";
  else if (vocab.find('/') == std::string::npos && vocab.find('.') == std::string::npos) file = "ggml-vocab-" + vocab + ".gguf";
  else return vocab;
  const char* env = std::getenv("RECLAIM_VOCAB_DIR");
  std::string dir = env && *env ? env : RECLAIM_LLAMA_VOCAB_DIR;
  if (dir.empty()) throw Error("no vocab folder: set RECLAIM_VOCAB_DIR to llama.cpp's models/ folder");
  std::string path = dir + "/" + file;
  if (::access(path.c_str(), R_OK) != 0) {
    throw Error("vocab file '" + path + "' not found (set RECLAIM_VOCAB_DIR to llama.cpp's models/ folder)");
  }
  return path;
}

namespace {

// Qwen2.5-Coder's, the layout llama-server's /infill fills.
constexpr const char* kFimTokens[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                                      "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>"};
constexpr int64_t kFimCount = sizeof kFimTokens / sizeof kFimTokens[0];

// Qwen3-Reranker's, as llama.cpp's conversion writes it: the model judges
// "yes" or "no", and a pair's score is the softmax's "yes".
const char* kRerankLabelNames[] = {"yes", "no"};
constexpr int64_t kRerankLabels = 2;
constexpr const char* kRerankTemplate =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n";

// The vocabulary's tokens and their types with the FIM tokens after them.
void add_fim_tokens(const gguf_context* vocab, gguf_context* g) {
  const int64_t tk = gguf_find_key(vocab, "tokenizer.ggml.tokens");
  const size_t n = gguf_get_arr_n(vocab, tk);
  std::vector<const char*> strs(n);
  for (size_t k = 0; k < n; ++k) strs[k] = gguf_get_arr_str(vocab, tk, k);
  for (const char* t : kFimTokens) strs.push_back(t);
  gguf_set_arr_str(g, "tokenizer.ggml.tokens", strs.data(), strs.size());
  const int64_t ty = gguf_find_key(vocab, "tokenizer.ggml.token_type");
  if (ty >= 0 && gguf_get_arr_type(vocab, ty) == GGUF_TYPE_INT32) {
    const auto* types = static_cast<const int32_t*>(gguf_get_arr_data(vocab, ty));
    std::vector<int32_t> all(types, types + gguf_get_arr_n(vocab, ty));
    all.resize(strs.size(), LLAMA_TOKEN_TYPE_CONTROL);
    gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, all.data(), all.size());
  }
  const int64_t sc = gguf_find_key(vocab, "tokenizer.ggml.scores");
  if (sc >= 0 && gguf_get_arr_type(vocab, sc) == GGUF_TYPE_FLOAT32) {
    const auto* scores = static_cast<const float*>(gguf_get_arr_data(vocab, sc));
    std::vector<float> all(scores, scores + gguf_get_arr_n(vocab, sc));
    all.resize(strs.size(), 0.0f);
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, all.data(), all.size());
  }
}

}  // namespace

TestModelShape test_model_shape(const TestModelSpec& spec) {
  ggml_type type = type_from_name(spec.type);
  TestModelShape s;
  if (spec.vocab == "none") {
    s.n_vocab = kNoVocabTokens;
  } else {
    GgufPtr vocab = open_vocab(vocab_file(spec.vocab));
    s.n_vocab = static_cast<int64_t>(gguf_get_arr_n(vocab.get(), gguf_find_key(vocab.get(), "tokenizer.ggml.tokens")));
    if (spec.fim) s.n_vocab += kFimCount;
  }
  if (spec.fim && spec.vocab == "none") throw Error("--fim needs a vocabulary (not --vocab none)");
  if (spec.split < 1 || spec.split > 99) throw Error("--split must be 1..99, got " + std::to_string(spec.split));
  if (spec.reranker && spec.vocab == "none") throw Error("--reranker needs a vocabulary (not --vocab none): its prompt is text");
  if (spec.size > 0) {
    // The shape nearest the target size, preferring embeddings near half of
    // it, so that neither the vocab nor the layers are a token part.
    double best = 1e300;
    for (int64_t e = 64; e <= 8192; e += 64) {
      TestModelShape c = s;
      c.n_embd = e;
      c.n_ff = ((e * 8 / 3) + 63) / 64 * 64;
      fill_heads(c);
      c.n_layer = 0;
      int64_t emb = shape_bytes(c, type);
      c.n_layer = 1;
      int64_t layer = shape_bytes(c, type) - emb;
      int64_t layers = std::llround(static_cast<double>(spec.size - emb) / static_cast<double>(layer));
      c.n_layer = std::clamp<int64_t>(layers, 1, 256);
      c.bytes = shape_bytes(c, type);
      double err = std::fabs(static_cast<double>(c.bytes - spec.size)) / static_cast<double>(spec.size) +
                   0.1 * std::fabs(static_cast<double>(emb) / static_cast<double>(c.bytes) - 0.5);
      if (err < best) {
        best = err;
        s = c;
      }
    }
  } else {
    if (spec.n_embd <= 0 || spec.n_layer <= 0) throw Error("give --size, or --embd and --layers");
    s.n_embd = spec.n_embd;
    s.n_layer = spec.n_layer;
    s.n_ff = spec.n_ff > 0 ? spec.n_ff : ((spec.n_embd * 8 / 3) + 63) / 64 * 64;
    fill_heads(s);
    s.bytes = shape_bytes(s, type);
  }
  if (s.n_embd % 64 != 0) throw Error("--embd must be a multiple of 64, got " + std::to_string(s.n_embd));
  if (spec.zero_layers_from >= s.n_layer || spec.zero_layers_from < -1) {
    throw Error("--zero-layers-from must be 0.." + std::to_string(s.n_layer - 1) + " (the model has " + std::to_string(s.n_layer) +
                " layers), got " + std::to_string(spec.zero_layers_from));
  }
  if (type == GGML_TYPE_Q8_0 && s.n_ff % 32 != 0) throw Error("--ff must be a multiple of 32 for q8_0");
  if (spec.reranker) {  // the classifier's two rows in place of the output, and each block's q/k norms
    const double w = bytes_per_weight(type);
    s.bytes += static_cast<int64_t>((kRerankLabels - s.n_vocab) * s.n_embd * w) +
               s.n_layer * 2 * (s.n_embd / s.n_head) * 4;
  }
  return s;
}

namespace {

// Only the tokenizer: the vocab file's own architecture keys are another
// model's.
void copy_tokenizer(const gguf_context* vocab, gguf_context* g) {
  for (int64_t i = 0; i < gguf_get_n_kv(vocab); ++i) {
    const char* key = gguf_get_key(vocab, i);
    if (std::strncmp(key, "tokenizer.", 10) != 0) continue;
    gguf_type t = gguf_get_kv_type(vocab, i);
    if (t == GGUF_TYPE_STRING) {
      gguf_set_val_str(g, key, gguf_get_val_str(vocab, i));
    } else if (t == GGUF_TYPE_ARRAY) {
      gguf_type at = gguf_get_arr_type(vocab, i);
      size_t n = gguf_get_arr_n(vocab, i);
      if (at == GGUF_TYPE_STRING) {
        std::vector<const char*> strs(n);
        for (size_t k = 0; k < n; ++k) strs[k] = gguf_get_arr_str(vocab, i, k);
        gguf_set_arr_str(g, key, strs.data(), n);
      } else {
        gguf_set_arr_data(g, key, at, gguf_get_arr_data(vocab, i), n);
      }
    } else {
      const void* v = gguf_get_val_data(vocab, i);
      switch (t) {
        case GGUF_TYPE_UINT32: gguf_set_val_u32(g, key, *static_cast<const uint32_t*>(v)); break;
        case GGUF_TYPE_INT32: gguf_set_val_i32(g, key, *static_cast<const int32_t*>(v)); break;
        case GGUF_TYPE_BOOL: gguf_set_val_bool(g, key, *static_cast<const bool*>(v)); break;
        case GGUF_TYPE_FLOAT32: gguf_set_val_f32(g, key, *static_cast<const float*>(v)); break;
        case GGUF_TYPE_UINT64: gguf_set_val_u64(g, key, *static_cast<const uint64_t*>(v)); break;
        default: break;  // no tokenizer key of another scalar type exists today
      }
    }
  }
}

// The architecture's tensors (llama's; qwen3's adds q/k norms and, for a
// reranker, has a classifier head in place of the output), as descriptors in
// `meta` and in `g`, in the order their data is written.
std::vector<ggml_tensor*> add_tensors(ggml_context* meta, gguf_context* g, const TestModelShape& s, ggml_type wtype,
                                      bool reranker) {
  std::vector<ggml_tensor*> tensors;
  auto add = [&](const std::string& name, ggml_type t, int64_t ne0, int64_t ne1) {
    ggml_tensor* x = ne1 > 0 ? ggml_new_tensor_2d(meta, t, ne0, ne1) : ggml_new_tensor_1d(meta, t, ne0);
    ggml_set_name(x, name.c_str());
    gguf_add_tensor(g, x);
    tensors.push_back(x);
  };
  const int64_t head_dim = s.n_embd / s.n_head, kv = head_dim * s.n_head_kv;
  add("token_embd.weight", wtype, s.n_embd, s.n_vocab);
  add("output_norm.weight", GGML_TYPE_F32, s.n_embd, 0);
  if (reranker) add("cls.output.weight", wtype, s.n_embd, kRerankLabels);
  else add("output.weight", wtype, s.n_embd, s.n_vocab);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", GGML_TYPE_F32, s.n_embd, 0);
    add(p + "attn_q.weight", wtype, s.n_embd, s.n_embd);
    add(p + "attn_k.weight", wtype, s.n_embd, kv);
    add(p + "attn_v.weight", wtype, s.n_embd, kv);
    add(p + "attn_output.weight", wtype, s.n_embd, s.n_embd);
    if (reranker) {
      add(p + "attn_q_norm.weight", GGML_TYPE_F32, head_dim, 0);
      add(p + "attn_k_norm.weight", GGML_TYPE_F32, head_dim, 0);
    }
    add(p + "ffn_norm.weight", GGML_TYPE_F32, s.n_embd, 0);
    add(p + "ffn_gate.weight", wtype, s.n_embd, s.n_ff);
    add(p + "ffn_down.weight", wtype, s.n_ff, s.n_embd);
    add(p + "ffn_up.weight", wtype, s.n_embd, s.n_ff);
  }
  return tensors;
}

// A block's output projection at or past `zero_from`: zeros, so that the
// block adds nothing (TestModelSpec::zero_layers_from).
bool zeroed(const char* name, int64_t zero_from) {
  if (zero_from < 0) return false;
  long long layer = -1;
  char what[64] = {0};
  if (std::sscanf(name, "blk.%lld.%63s", &layer, what) != 2) return false;
  const std::string w = what;
  return layer >= zero_from && (w == "attn_output.weight" || w == "ffn_down.weight");
}

// Each tensor's random weights (norms: ones; zeroed() ones: zeros), row by
// row in its type, padded to the file's alignment.
void write_weights(std::FILE* f, const std::string& tmp, const std::vector<ggml_tensor*>& tensors, size_t align,
                   uint64_t seed, int64_t zero_from) {
  std::vector<float> row;
  std::vector<uint8_t> packed;
  const std::vector<uint8_t> zeros(align, 0);
  for (ggml_tensor* x : tensors) {
    const int64_t ne0 = x->ne[0], rows = ggml_nrows(x);
    Rng rng{hash_name(x->name, seed)};
    const bool is_norm = ggml_n_dims(x) == 1;
    // Uniform weights with std 1/sqrt(fan-in) keep activations in range through any depth.
    const float scale = is_norm || zeroed(x->name, zero_from) ? 0.0f : std::sqrt(3.0f / static_cast<float>(ne0));
    row.resize(static_cast<size_t>(ne0));
    packed.resize(ggml_row_size(x->type, ne0));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < ne0; ++i) row[static_cast<size_t>(i)] = is_norm ? 1.0f : rng.uniform() * scale;
      if (x->type == GGML_TYPE_F32) {
        write_all(f, row.data(), row.size() * sizeof(float), tmp);
        continue;
      }
      if (x->type == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(row.data(), reinterpret_cast<ggml_fp16_t*>(packed.data()), ne0);
      } else {
        ggml_quantize_chunk(x->type, row.data(), packed.data(), 0, 1, ne0, nullptr);
      }
      write_all(f, packed.data(), packed.size(), tmp);
    }
    size_t n = ggml_nbytes(x);
    size_t pad = (align - n % align) % align;
    write_all(f, zeros.data(), pad, tmp);
  }
}

}  // namespace

namespace {

// One GGUF file: `g`'s header, then `tensors`' weights (via a temporary
// file, renamed at the end).
void write_part(const std::string& out, gguf_context* g, const std::vector<ggml_tensor*>& tensors, uint64_t seed,
                int64_t zero_from) {
  std::string tmp = out + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot create '" + tmp + "': " + std::strerror(errno));
  bool done = false;
  Defer close_file([&] {
    std::fclose(f);
    if (!done) std::remove(tmp.c_str());
  });
  std::vector<uint8_t> header(gguf_get_meta_size(g));
  gguf_get_meta_data(g, header.data());
  write_all(f, header.data(), header.size(), tmp);
  write_weights(f, tmp, tensors, gguf_get_alignment(g), seed, zero_from);
  if (std::fflush(f) != 0) throw Error("cannot write '" + tmp + "': " + std::strerror(errno));
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    throw Error("cannot rename '" + tmp + "' to '" + out + "': " + std::strerror(errno));
  }
  done = true;
}

}  // namespace

TestModelShape make_test_model(const TestModelSpec& spec, const std::string& out) {
  ggml_type wtype = type_from_name(spec.type);
  std::string vocab_path = vocab_file(spec.vocab);
  TestModelShape s = test_model_shape(spec);
  GgufPtr vocab(vocab_path.empty() ? gguf_init_empty() : open_vocab(vocab_path).release());
  GgufPtr g(gguf_init_empty());

  const std::string arch = spec.reranker ? "qwen3" : "llama";
  auto key = [&arch](const char* k) { return arch + "." + k; };
  gguf_set_val_str(g.get(), "general.architecture", arch.c_str());
  gguf_set_val_str(g.get(), "general.name", "reclaim-test-model");
  gguf_set_val_u32(g.get(), "general.file_type",
                   wtype == GGML_TYPE_F32 ? 0u : wtype == GGML_TYPE_F16 ? 1u : 7u);
  gguf_set_val_u64(g.get(), "reclaim.test_model.seed", spec.seed);
  if (spec.zero_layers_from >= 0) {
    gguf_set_val_u32(g.get(), "reclaim.test_model.zero_layers_from", static_cast<uint32_t>(spec.zero_layers_from));
  }
  gguf_set_val_u32(g.get(), key("context_length").c_str(), static_cast<uint32_t>(spec.n_ctx_train));
  gguf_set_val_u32(g.get(), key("embedding_length").c_str(), static_cast<uint32_t>(s.n_embd));
  gguf_set_val_u32(g.get(), key("block_count").c_str(), static_cast<uint32_t>(s.n_layer));
  gguf_set_val_u32(g.get(), key("feed_forward_length").c_str(), static_cast<uint32_t>(s.n_ff));
  gguf_set_val_u32(g.get(), key("attention.head_count").c_str(), static_cast<uint32_t>(s.n_head));
  gguf_set_val_u32(g.get(), key("attention.head_count_kv").c_str(), static_cast<uint32_t>(s.n_head_kv));
  gguf_set_val_u32(g.get(), key("rope.dimension_count").c_str(), static_cast<uint32_t>(s.n_embd / s.n_head));
  gguf_set_val_f32(g.get(), key("attention.layer_norm_rms_epsilon").c_str(), 1e-5f);
  gguf_set_val_f32(g.get(), key("rope.freq_base").c_str(), 10000.0f);
  gguf_set_val_u32(g.get(), key("vocab_size").c_str(), static_cast<uint32_t>(s.n_vocab));
  if (spec.reranker) {
    gguf_set_val_u32(g.get(), key("pooling_type").c_str(), LLAMA_POOLING_TYPE_RANK);
    gguf_set_arr_str(g.get(), key("classifier.output_labels").c_str(), kRerankLabelNames, kRerankLabels);
  }
  // As llama.cpp's tests/test-llama-archs writes it: token ids in and out.
  if (vocab_path.empty()) gguf_set_val_str(g.get(), "tokenizer.ggml.model", "no_vocab");
  copy_tokenizer(vocab.get(), g.get());
  if (spec.fim) add_fim_tokens(vocab.get(), g.get());
  if (!spec.chat_template.empty()) gguf_set_val_str(g.get(), "tokenizer.chat_template", spec.chat_template.c_str());
  if (spec.reranker) gguf_set_val_str(g.get(), "tokenizer.chat_template.rerank", kRerankTemplate);

  // Tensor descriptors only: the data is generated and written one tensor at a time.
  const int64_t n_tensors = 3 + 11 * s.n_layer;
  ggml_init_params ip{static_cast<size_t>(n_tensors + 1) * ggml_tensor_overhead(), nullptr, true};
  GgmlPtr meta(ggml_init(ip));
  const std::vector<ggml_tensor*> tensors = add_tensors(meta.get(), g.get(), s, wtype, spec.reranker);

  if (spec.split <= 1) {
    write_part(out, g.get(), tensors, spec.seed, spec.zero_layers_from);
    return s;
  }
  // As llama.cpp's gguf-split writes them: every key in the first part, the
  // split keys in each, the tensors in order across the parts.
  const std::string prefix = out.size() > 5 && out.compare(out.size() - 5, 5, ".gguf") == 0 ? out.substr(0, out.size() - 5) : out;
  const size_t n = tensors.size(), parts = static_cast<size_t>(spec.split);
  for (size_t p = 0; p < parts; ++p) {
    GgufPtr part(gguf_init_empty());
    if (p == 0) gguf_set_kv(part.get(), g.get());
    gguf_set_val_u16(part.get(), "split.no", static_cast<uint16_t>(p));
    gguf_set_val_u16(part.get(), "split.count", static_cast<uint16_t>(parts));
    gguf_set_val_i32(part.get(), "split.tensors.count", static_cast<int32_t>(n));
    const std::vector<ggml_tensor*> mine(tensors.begin() + static_cast<long>(p * n / parts),
                                         tensors.begin() + static_cast<long>((p + 1) * n / parts));
    for (ggml_tensor* x : mine) gguf_add_tensor(part.get(), x);
    char name[32];
    std::snprintf(name, sizeof name, "-%05zu-of-%05zu.gguf", p + 1, parts);
    write_part(prefix + name, part.get(), mine, spec.seed, spec.zero_layers_from);
  }
  return s;
}

std::string cache_dir() {
  const char* c = std::getenv("RECLAIM_CACHE");
  std::string dir;
  if (c && *c) dir = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/reclaim";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/reclaim";
  else dir = "/tmp/reclaim-cache";
  return dir;
}

std::string default_test_model() {
  std::string dir = cache_dir() + "/models";
  for (size_t i = 1; i <= dir.size(); ++i) {  // mkdir -p
    if (i == dir.size() || dir[i] == '/') {
      std::string part = dir.substr(0, i);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
        throw Error("cannot create cache folder '" + part + "': " + std::strerror(errno));
      }
    }
  }
  std::string path = dir + "/test-bpe-300MiB-f16-s1.gguf";
  if (::access(path.c_str(), R_OK) == 0) return path;
  TestModelSpec spec;
  spec.vocab = "bpe";
  spec.type = "f16";
  spec.size = parse_size("300MiB");
  spec.seed = 1;
  std::fprintf(stderr, "reclaim: making the default test model %s (once)\n", path.c_str());
  make_test_model(spec, path);
  return path;
}

}  // namespace reclaim
