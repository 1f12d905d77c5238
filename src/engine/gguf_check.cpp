#include "engine/gguf_check.h"

#include <gguf.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <functional>
#include <vector>

#include "core/defer.h"
#include "engine/llama_runtime.h"

namespace reclaim {

namespace {

// llama.cpp's limits (src/llama-hparams.h); the rest are far past any real
// model and keep the arithmetic that follows them from overflowing.
constexpr int64_t kMaxLayers = 512;
constexpr int64_t kMaxExperts = 1024;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // embedding, feed-forward and head sizes
constexpr int64_t kMaxHeads = int64_t{1} << 14;

class Meta {
 public:
  Meta(const gguf_context* ctx, std::string path) : ctx_(ctx), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidModelFile("model file '" + path_ + "' is damaged: " + why);
  }

  int64_t find(const std::string& key) const { return gguf_find_key(ctx_, key.c_str()); }

  // Integers of any width, as int64 (a u64 past int64 is read as its maximum,
  // which every range check below refuses).
  static std::optional<int64_t> integer(gguf_type t, const void* p) {
    switch (t) {
      case GGUF_TYPE_UINT8: return *static_cast<const uint8_t*>(p);
      case GGUF_TYPE_INT8: return *static_cast<const int8_t*>(p);
      case GGUF_TYPE_UINT16: return *static_cast<const uint16_t*>(p);
      case GGUF_TYPE_INT16: return *static_cast<const int16_t*>(p);
      case GGUF_TYPE_UINT32: return *static_cast<const uint32_t*>(p);
      case GGUF_TYPE_INT32: return *static_cast<const int32_t*>(p);
      case GGUF_TYPE_INT64: return *static_cast<const int64_t*>(p);
      case GGUF_TYPE_UINT64: {
        const uint64_t v = *static_cast<const uint64_t*>(p);
        return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                             : static_cast<int64_t>(v);
      }
      default: return std::nullopt;
    }
  }

  // A scalar or a per-layer array of integers; empty when the key is absent.
  std::vector<int64_t> integers(const std::string& key) const {
    const int64_t id = find(key);
    if (id < 0) return {};
    const gguf_type t = gguf_get_kv_type(ctx_, id);
    std::vector<int64_t> out;
    if (t == GGUF_TYPE_ARRAY) {
      const gguf_type at = gguf_get_arr_type(ctx_, id);
      const size_t n = gguf_get_arr_n(ctx_, id);
      if (at == GGUF_TYPE_STRING || at == GGUF_TYPE_ARRAY) fail("'" + key + "' is an array of " + gguf_type_name(at) + ", not of integers");
      const auto* data = static_cast<const uint8_t*>(gguf_get_arr_data(ctx_, id));
      const size_t width = type_size(at);
      for (size_t i = 0; i < n; ++i) {
        std::optional<int64_t> v = integer(at, data + i * width);
        if (!v) fail("'" + key + "' is an array of " + gguf_type_name(at) + ", not of integers");
        out.push_back(*v);
      }
      return out;
    }
    std::optional<int64_t> v = integer(t, gguf_get_val_data(ctx_, id));
    if (!v) fail("'" + key + "' is a " + gguf_type_name(t) + ", not an integer");
    out.push_back(*v);
    return out;
  }

  std::optional<int64_t> scalar(const std::string& key) const {
    std::vector<int64_t> v = integers(key);
    if (v.empty()) return std::nullopt;
    if (v.size() != 1) fail("'" + key + "' is an array; a single integer was expected");
    return v[0];
  }

  // A key that is absent is llama.cpp's to report (it knows which each
  // architecture requires, and names an unknown architecture first).
  void range(const std::string& key, int64_t lo, int64_t hi) const {
    for (int64_t v : integers(key)) {
      if (v < lo || v > hi) {
        fail("'" + key + "' is " + std::to_string(v) + " (must be " + std::to_string(lo) + " to " + std::to_string(hi) + ")");
      }
    }
  }

  // Every float of the architecture's keys must be a number; epsilons and
  // the rope's base and scale must not be negative. One key may be -inf:
  // llama.cpp's own default for the KDA gate's lower bound ("none"), which
  // its model saver writes into every file it saves (tests/test-llama-archs'
  // models have it).
  void floats(const std::string& prefix) const {
    for (int64_t i = 0; i < gguf_get_n_kv(ctx_); ++i) {
      const std::string key = gguf_get_key(ctx_, i);
      if (key.rfind(prefix, 0) != 0) continue;
      gguf_type t = gguf_get_kv_type(ctx_, i);
      std::vector<double> vs;
      if (t == GGUF_TYPE_FLOAT32) vs.push_back(gguf_get_val_f32(ctx_, i));
      if (t == GGUF_TYPE_FLOAT64) vs.push_back(gguf_get_val_f64(ctx_, i));
      if (t == GGUF_TYPE_ARRAY && (gguf_get_arr_type(ctx_, i) == GGUF_TYPE_FLOAT32)) {
        const auto* d = static_cast<const float*>(gguf_get_arr_data(ctx_, i));
        for (size_t j = 0; j < gguf_get_arr_n(ctx_, i); ++j) vs.push_back(d[j]);
      }
      const bool non_negative = key.find("epsilon") != std::string::npos || key.find(".rope.freq_base") != std::string::npos ||
                                key.find(".rope.scale") != std::string::npos || key.find(".rope.scaling.factor") != std::string::npos;
      const bool unbounded_ok = key.size() > 21 && key.compare(key.size() - 21, 21, ".kda.gate_lower_bound") == 0;
      for (double v : vs) {
        if (unbounded_ok && std::isinf(v) && v < 0) continue;
        if (!std::isfinite(v)) fail("'" + key + "' is " + std::to_string(v) + " (must be a finite number)");
        if (non_negative && v < 0) fail("'" + key + "' is " + std::to_string(v) + " (must not be negative)");
      }
    }
  }

 private:
  static size_t type_size(gguf_type t) {
    switch (t) {
      case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
      case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
      case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
      default: return 8;
    }
  }

  const gguf_context* ctx_;
  std::string path_;
};

void check_heads(const Meta& m, const std::string& a) {
  const std::vector<int64_t> heads = m.integers(a + ".attention.head_count");
  const std::vector<int64_t> kv = m.integers(a + ".attention.head_count_kv");
  for (size_t i = 0; i < kv.size(); ++i) {
    const int64_t h = heads.empty() ? 0 : heads[heads.size() == 1 ? 0 : std::min(i, heads.size() - 1)];
    if (kv[i] > 0 && h > 0 && h % kv[i] != 0) {
      m.fail("'" + a + ".attention.head_count_kv' is " + std::to_string(kv[i]) + ", which does not divide '" + a +
             ".attention.head_count' " + std::to_string(h));
    }
  }
}

void check_experts(const Meta& m, const std::string& a) {
  const int64_t experts = m.scalar(a + ".expert_count").value_or(0);
  int64_t used_max = 0;
  for (int64_t u : m.integers(a + ".expert_used_count")) used_max = std::max(used_max, u);
  const int64_t groups = m.scalar(a + ".expert_group_count").value_or(0);
  if (experts > 0 && used_max == 0) m.fail("'" + a + ".expert_count' is " + std::to_string(experts) + " but no expert is used per token");
  if (used_max > experts) {
    m.fail("'" + a + ".expert_used_count' is " + std::to_string(used_max) + ", more than '" + a + ".expert_count' " +
           std::to_string(experts));
  }
  if (groups != 0 && groups >= experts) {
    m.fail("'" + a + ".expert_group_count' is " + std::to_string(groups) + " with " + std::to_string(experts) + " experts");
  }
}

// The vocab: its size against the embedding's rows, and tokens that are
// all different (llama.cpp asserts that its token-to-id map is as long as
// the list; scripts/fuzz found the assert). A model without a tokenizer
// (no_vocab) has only a size, which llama.cpp allocates as it is.
void check_vocab(const gguf_context* ctx, const Meta& m, const std::string& arch) {
  const int64_t tokens = gguf_find_key(ctx, "tokenizer.ggml.tokens");
  const int64_t embd = gguf_find_tensor(ctx, "token_embd.weight");
  const int64_t rows = embd >= 0 ? gguf_get_tensor_ne(ctx, embd)[1] : -1;
  const int64_t model = gguf_find_key(ctx, "tokenizer.ggml.model");
  const std::string_view kind = model >= 0 && gguf_get_kv_type(ctx, model) == GGUF_TYPE_STRING ? gguf_get_val_str(ctx, model) : "";
  const bool no_vocab = kind == "no_vocab" || kind == "none";
  if (no_vocab) {
    const std::optional<int64_t> size = m.scalar(arch + ".vocab_size");
    if (size && rows >= 0 && *size > rows) {
      m.fail("'" + arch + ".vocab_size' is " + std::to_string(*size) + " but 'token_embd.weight' has " + std::to_string(rows) + " rows");
    }
    return;
  }
  if (tokens < 0) return;
  if (gguf_get_kv_type(ctx, tokens) != GGUF_TYPE_ARRAY || gguf_get_arr_type(ctx, tokens) != GGUF_TYPE_STRING) {
    m.fail("'tokenizer.ggml.tokens' is not an array of strings");
  }
  const size_t n = gguf_get_arr_n(ctx, tokens);
  if (n == 0) m.fail("'tokenizer.ggml.tokens' is empty");
  if (rows >= 0 && static_cast<int64_t>(n) != rows) {
    m.fail("the vocab has " + std::to_string(n) + " tokens but 'token_embd.weight' has " + std::to_string(rows) + " rows");
  }
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    m.fail("'tokenizer.ggml.tokens' has " + std::to_string(n) + " tokens, more than a token id can name");
  }
  // An open-addressing table of token indices, one allocation: a node-based
  // map of 151,936 tokens took 30 ms of a vetting child's 600 (perf record
  // of `reclaim __vet`), most of it in the allocator and page faults.
  size_t slots = 16;
  while (slots < 2 * n) slots *= 2;
  constexpr uint32_t kEmpty = UINT32_MAX;
  std::vector<uint32_t> table(slots, kEmpty);
  const std::hash<std::string_view> hash;
  for (size_t i = 0; i < n; ++i) {
    const std::string_view token = gguf_get_arr_str(ctx, tokens, i);
    for (size_t at = hash(token) & (slots - 1);; at = (at + 1) & (slots - 1)) {
      if (table[at] == kEmpty) {
        table[at] = static_cast<uint32_t>(i);
        break;
      }
      if (gguf_get_arr_str(ctx, tokens, table[at]) == token) {
        m.fail("tokens " + std::to_string(table[at]) + " and " + std::to_string(i) + " of 'tokenizer.ggml.tokens' are the same ('" +
               std::string(token.substr(0, 40)) + "')");
      }
    }
  }
}

// Integer and f64 tensors: no weight of any architecture is one, and the CPU
// backend has no dot product for them (an int8 matrix is a call through a
// null pointer in the first decode).
void check_tensor_types(const gguf_context* ctx, const Meta& m) {
  for (int64_t i = 0; i < gguf_get_n_tensors(ctx); ++i) {
    const ggml_type t = gguf_get_tensor_type(ctx, i);
    if (t == GGML_TYPE_I8 || t == GGML_TYPE_I16 || t == GGML_TYPE_I32 || t == GGML_TYPE_I64 || t == GGML_TYPE_F64) {
      m.fail("tensor '" + std::string(gguf_get_tensor_name(ctx, i)) + "' is of type " + ggml_type_name(t) +
             ", which no model weight is");
    }
  }
}

}  // namespace

void check_gguf_metadata(const std::string& path) {
  take_llama_errors();
  gguf_init_params params{.no_alloc = true, .ctx = nullptr};
  gguf_context* ctx = gguf_init_from_file(path.c_str(), params);
  if (!ctx) {
    std::string why = take_llama_errors();
    throw InvalidModelFile("model file '" + path + "' is not a readable GGUF file: " + (why.empty() ? "ggml gave no reason" : why));
  }
  Defer free_ctx([ctx] { gguf_free(ctx); });
  Meta m(ctx, path);
  const int64_t arch_id = gguf_find_key(ctx, "general.architecture");
  if (arch_id < 0) m.fail("'general.architecture' is missing");
  if (gguf_get_kv_type(ctx, arch_id) != GGUF_TYPE_STRING) m.fail("'general.architecture' is not a string");
  const std::string a = gguf_get_val_str(ctx, arch_id);
  m.range(a + ".block_count", 1, kMaxLayers);
  m.range(a + ".nextn_predict_layers", 0, m.scalar(a + ".block_count").value_or(0));
  m.range(a + ".embedding_length", 1, kMaxWidth);
  m.range(a + ".context_length", 1, std::numeric_limits<int32_t>::max());
  m.range(a + ".feed_forward_length", 0, kMaxWidth);
  m.range(a + ".attention.head_count", 0, kMaxHeads);
  m.range(a + ".attention.head_count_kv", 0, kMaxHeads);
  m.range(a + ".attention.key_length", 0, kMaxWidth);
  m.range(a + ".attention.value_length", 0, kMaxWidth);
  m.range(a + ".rope.dimension_count", 0, kMaxWidth);
  m.range(a + ".expert_count", 0, kMaxExperts);
  m.range(a + ".expert_used_count", 0, kMaxExperts);
  m.range(a + ".vocab_size", 0, std::numeric_limits<int32_t>::max());
  check_heads(m, a);
  check_experts(m, a);
  m.floats(a + ".");
  const int64_t scaling = m.find(a + ".rope.scaling.type");
  if (scaling >= 0) {
    if (gguf_get_kv_type(ctx, scaling) != GGUF_TYPE_STRING) m.fail("'" + a + ".rope.scaling.type' is not a string");
    const std::string s = gguf_get_val_str(ctx, scaling);
    if (s != "none" && s != "linear" && s != "yarn" && s != "longrope") {
      m.fail("'" + a + ".rope.scaling.type' is '" + s + "' (must be none, linear, yarn or longrope)");
    }
  }
  check_vocab(ctx, m, a);
  check_tensor_types(ctx, m);
}

}  // namespace reclaim
