// A hostile corpus: damaged copies of a good GGUF file, each damaged in one
// way, written into a folder. The tests feed them to `reclaim run` and to a
// live `reclaim serve`; the fuzzer (tests/fuzz_gguf.cpp) starts from them.
//
// The walk below reads only the layout (where each key, value, tensor info
// and the data begin), so that the damage lands on a boundary or a field:
//  - truncations at each structural boundary (header, each key-value pair,
//    each tensor info, the data);
//  - every numeric hyper-parameter of the architecture, and the tokenizer's
//    special ids, set to 0, -1 and a huge value, and to NaN and Inf (for an
//    integer key, by retyping its 4 bytes as a float32);
//  - string and array lengths past the end of the file;
//  - tensor shapes, types and offsets that do not match the architecture.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace reclaim::testing {

struct GgufField {
  std::string key;
  uint32_t type = 0;      // gguf_type
  size_t key_at = 0;      // the key's length field
  size_t type_at = 0;     // the value's type field
  size_t value_at = 0;    // the value (for an array: its element type)
  size_t end = 0;         // one past the value
};

struct GgufTensorInfo {
  std::string name;
  size_t at = 0, n_dims_at = 0, dims_at = 0, type_at = 0, offset_at = 0, end = 0;
  uint32_t n_dims = 0;
};

struct GgufLayout {
  size_t header_end = 24;
  std::vector<GgufField> fields;
  std::vector<GgufTensorInfo> tensors;
  size_t infos_end = 0;
  size_t data_at = 0;  // aligned start of the tensor data
};

class GgufWalker {
 public:
  explicit GgufWalker(const std::string& bytes) : b_(bytes) {}

  GgufLayout walk() {
    GgufLayout l;
    if (b_.size() < 24 || b_.compare(0, 4, "GGUF") != 0) throw std::runtime_error("not a GGUF file");
    const uint64_t n_tensors = u64(8), n_kv = u64(16);
    size_t o = 24;
    size_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; ++i) {
      GgufField f;
      f.key_at = o;
      f.key = str(o);
      f.type_at = o;
      f.type = u32(o);
      o += 4;
      f.value_at = o;
      o = skip_value(f.type, o);
      f.end = o;
      if (f.key == "general.alignment") alignment = u32(f.value_at);
      l.fields.push_back(f);
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo t;
      t.at = o;
      t.name = str(o);
      t.n_dims_at = o;
      t.n_dims = u32(o);
      o += 4;
      t.dims_at = o;
      o += 8 * t.n_dims;
      t.type_at = o;
      o += 4;
      t.offset_at = o;
      o += 8;
      t.end = o;
      l.tensors.push_back(t);
    }
    l.infos_end = o;
    l.data_at = (o + alignment - 1) / alignment * alignment;
    return l;
  }

  uint32_t u32(size_t o) const { return get<uint32_t>(o); }
  uint64_t u64(size_t o) const { return get<uint64_t>(o); }

 private:
  template <class T>
  T get(size_t o) const {
    if (o + sizeof(T) > b_.size()) throw std::runtime_error("GGUF layout runs past the end");
    T v;
    std::memcpy(&v, b_.data() + o, sizeof v);
    return v;
  }
  std::string str(size_t& o) const {
    const uint64_t n = u64(o);
    if (o + 8 + n > b_.size()) throw std::runtime_error("GGUF string runs past the end");
    std::string s = b_.substr(o + 8, n);
    o += 8 + n;
    return s;
  }
  static size_t scalar_size(uint32_t t) {
    switch (t) {
      case 0: case 1: case 7: return 1;
      case 2: case 3: return 2;
      case 4: case 5: case 6: return 4;
      case 10: case 11: case 12: return 8;
      default: return 0;
    }
  }
  size_t skip_value(uint32_t t, size_t o) const {
    if (size_t s = scalar_size(t)) return o + s;
    if (t == 8) {
      std::string ignored = str(o);
      return o;
    }
    if (t == 9) {
      const uint32_t at = u32(o);
      const uint64_t n = u64(o + 4);
      o += 12;
      if (size_t s = scalar_size(at)) return o + s * n;
      for (uint64_t i = 0; i < n; ++i) o = skip_value(at, o);
      return o;
    }
    throw std::runtime_error("unknown GGUF type " + std::to_string(t));
  }
  const std::string& b_;
};

struct DamagedFile {
  std::string name;   // what was done, as a file name
  std::string bytes;
  bool must_fail;     // false: a value llama.cpp may accept (the answer may be 200)
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

template <class T>
inline void put(std::string& b, size_t o, T v) {
  std::memcpy(b.data() + o, &v, sizeof v);
}

// Calls `emit` once for each damaged copy of `good` (the bytes of a GGUF
// file of the llama architecture), so that only one is in memory at a time.
inline void for_each_damage(const std::string& good, const std::function<void(const DamagedFile&)>& emit) {
  GgufWalker w(good);
  const GgufLayout l = w.walk();
  auto cut = [&](const std::string& name, size_t at) { emit({"trunc-" + name, good.substr(0, at), true}); };
  auto patched = [&](const std::string& name, bool must_fail, const std::function<void(std::string&)>& fn) {
    std::string b = good;
    fn(b);
    emit({name, std::move(b), must_fail});
  };
  auto safe = [](std::string s) {
    for (char& c : s) {
      if (c == '.' || c == '/') c = '_';
    }
    return s;
  };

  // Truncations: inside the magic, the header, a key; after each key-value
  // pair and each tensor info; at the data, inside it, one byte short.
  cut("magic", 2);
  cut("version", 6);
  cut("counts", 20);
  cut("header", l.header_end);
  cut("first-key", l.fields.front().key_at + 10);
  for (const GgufField& f : l.fields) cut("after-" + safe(f.key), f.end);
  for (const GgufField& f : l.fields) {
    if (f.type == 9 && f.end - f.value_at > 1024) cut("inside-" + safe(f.key), f.value_at + (f.end - f.value_at) / 2);
  }
  for (size_t i = 0; i < l.tensors.size(); i += 4) cut("after-info-" + safe(l.tensors[i].name), l.tensors[i].end);
  cut("infos", l.infos_end);
  cut("data-start", l.data_at);
  cut("data-middle", l.data_at + (good.size() - l.data_at) / 2);
  cut("one-byte-short", good.size() - 1);

  // Hyper-parameters: every numeric key of the architecture, and the
  // tokenizer's special ids.
  std::string arch;
  for (const GgufField& f : l.fields) {
    if (f.key == "general.architecture") arch = good.substr(f.value_at + 8, w.u64(f.value_at));
  }
  for (const GgufField& f : l.fields) {
    const bool hparam = f.key.rfind(arch + ".", 0) == 0;
    const bool special_id = f.key.rfind("tokenizer.ggml.", 0) == 0 && f.key.find("_id") != std::string::npos;
    if (!hparam && !special_id) continue;
    // A count or length of 0, -1 or 4e9 is wrong wherever it is; a special
    // token id or a rope setting out of range may be ignored by llama.cpp.
    const bool counts = hparam && f.key.find("rope") == std::string::npos && f.key.find("context_length") == std::string::npos &&
                        f.key.find("vocab_size") == std::string::npos;
    const std::string n = safe(f.key);
    if (f.type == 4 || f.type == 5) {  // u32, i32
      patched(n + "=0", counts, [&](std::string& b) { put<uint32_t>(b, f.value_at, 0); });
      patched(n + "=-1", counts, [&](std::string& b) { put<int32_t>(b, f.value_at, -1); });
      patched(n + "=huge", counts, [&](std::string& b) { put<uint32_t>(b, f.value_at, 4000000); });
      // Retyped: llama.cpp reads an integer key and finds a float.
      patched(n + "=nan", hparam, [&](std::string& b) {
        put<uint32_t>(b, f.type_at, 6);
        put<float>(b, f.value_at, std::numeric_limits<float>::quiet_NaN());
      });
      patched(n + "=inf", hparam, [&](std::string& b) {
        put<uint32_t>(b, f.type_at, 6);
        put<float>(b, f.value_at, std::numeric_limits<float>::infinity());
      });
    } else if (f.type == 6) {  // f32
      patched(n + "=0", false, [&](std::string& b) { put<float>(b, f.value_at, 0.0f); });
      patched(n + "=-1", true, [&](std::string& b) { put<float>(b, f.value_at, -1.0f); });
      patched(n + "=huge", false, [&](std::string& b) { put<float>(b, f.value_at, 1e30f); });
      patched(n + "=nan", true, [&](std::string& b) { put<float>(b, f.value_at, std::numeric_limits<float>::quiet_NaN()); });
      patched(n + "=inf", true, [&](std::string& b) { put<float>(b, f.value_at, std::numeric_limits<float>::infinity()); });
    }
  }

  // Lengths past the end: a key's, a string value's, an array's count, and
  // one string inside the token list.
  const uint64_t past = good.size() * 4ull + 12345;
  patched("key-length-past-end", true, [&](std::string& b) { put<uint64_t>(b, l.fields[1].key_at, past); });
  for (const GgufField& f : l.fields) {
    if (f.type == 8 && f.key == "general.architecture") {
      patched("string-length-past-end", true, [&](std::string& b) { put<uint64_t>(b, f.value_at, past); });
    }
    if (f.type == 9 && f.key == "tokenizer.ggml.tokens") {
      patched("array-count-past-end", true, [&](std::string& b) { put<uint64_t>(b, f.value_at + 4, past); });
      patched("array-count-huge", true, [&](std::string& b) { put<uint64_t>(b, f.value_at + 4, uint64_t{1} << 62); });
      patched("token-string-past-end", true, [&](std::string& b) { put<uint64_t>(b, f.value_at + 12 + 8 * 0 + 0, past); });
    }
  }
  // Two tokens alike: llama.cpp asserts that its token-to-id map is as long
  // as the token list (scripts/fuzz found it).
  for (const GgufField& f : l.fields) {
    if (f.type != 9 || f.key != "tokenizer.ggml.tokens") continue;
    size_t o = f.value_at + 12, first_at = 0, first_len = 0;
    for (int i = 0; i < 4096 && o + 8 <= good.size(); ++i) {
      const uint64_t len = w.u64(o);
      if (len >= 3 && first_len == 0) {
        first_at = o + 8;
        first_len = len;
      } else if (len == first_len && o + 8 != first_at) {
        patched("tokens-duplicate", true, [&](std::string& b) { b.replace(o + 8, len, good, first_at, len); });
        break;
      }
      o += 8 + len;
    }
  }
  patched("tensor-count-huge", true, [&](std::string& b) { put<uint64_t>(b, 8, uint64_t{1} << 40); });
  patched("kv-count-huge", true, [&](std::string& b) { put<uint64_t>(b, 16, uint64_t{1} << 40); });
  patched("tensor-name-past-end", true, [&](std::string& b) { put<uint64_t>(b, l.tensors[0].at, past); });

  // Tensors that do not match the architecture.
  const GgufTensorInfo* embd = &l.tensors[0];
  const GgufTensorInfo* q = nullptr;
  for (const GgufTensorInfo& t : l.tensors) {
    if (t.name == "blk.0.attn_q.weight") q = &t;
  }
  patched("embd-rows-halved", true, [&](std::string& b) { put<uint64_t>(b, embd->dims_at + 8, w.u64(embd->dims_at + 8) / 2); });
  patched("embd-width-doubled", true, [&](std::string& b) { put<uint64_t>(b, embd->dims_at, w.u64(embd->dims_at) * 2); });
  patched("embd-width-zero", true, [&](std::string& b) { put<uint64_t>(b, embd->dims_at, 0); });
  if (q) {
    patched("attn-q-transposed-shape", true, [&](std::string& b) {
      put<uint64_t>(b, q->dims_at, w.u64(q->dims_at) * 2);
      put<uint64_t>(b, q->dims_at + 8, w.u64(q->dims_at + 8) / 2);
    });
    patched("attn-q-type-f32", true, [&](std::string& b) { put<uint32_t>(b, q->type_at, 0); });
    patched("attn-q-type-invalid", true, [&](std::string& b) { put<uint32_t>(b, q->type_at, 99); });
    patched("attn-q-n-dims-5", true, [&](std::string& b) { put<uint32_t>(b, q->n_dims_at, 5); });
    patched("attn-q-offset-past-end", true, [&](std::string& b) { put<uint64_t>(b, q->offset_at, past); });
    patched("attn-q-offset-misaligned", true, [&](std::string& b) { put<uint64_t>(b, q->offset_at, w.u64(q->offset_at) + 1); });
  }
  // The last tensor's data ends the file, so a smaller element type still
  // passes every offset check; int8 weights have no CPU dot product, and
  // ggml's matrix multiply calls a null function (a SIGSEGV in the decode,
  // which reclaim's checks now name).
  const GgufTensorInfo* last = &l.tensors[0];
  for (const GgufTensorInfo& t : l.tensors) {
    if (w.u64(t.offset_at) > w.u64(last->offset_at)) last = &t;
  }
  patched("last-tensor-type-i8", true, [&](std::string& b) { put<uint32_t>(b, last->type_at, 24); });
  patched("first-tensor-renamed", true, [&](std::string& b) { b[embd->at + 8] = 'X'; });
  patched("version-99", true, [&](std::string& b) { put<uint32_t>(b, 4, 99); });
}

}  // namespace reclaim::testing
