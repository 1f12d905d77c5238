#include "engine/gguf_summary.h"

#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <cstdio>

#include "core/defer.h"
#include "core/heap.h"
#include "engine/owners.h"
#include "engine/llama_runtime.h"

namespace reclaim {

namespace {

// llama.cpp's own names (llama_model_ftype_name, which it does not export).
std::string file_type_name(int64_t t) {
  switch (t) {
    case LLAMA_FTYPE_ALL_F32: return "F32";
    case LLAMA_FTYPE_MOSTLY_F16: return "F16";
    case LLAMA_FTYPE_MOSTLY_BF16: return "BF16";
    case LLAMA_FTYPE_MOSTLY_Q4_0: return "Q4_0";
    case LLAMA_FTYPE_MOSTLY_Q4_1: return "Q4_1";
    case LLAMA_FTYPE_MOSTLY_Q5_0: return "Q5_0";
    case LLAMA_FTYPE_MOSTLY_Q5_1: return "Q5_1";
    case LLAMA_FTYPE_MOSTLY_Q8_0: return "Q8_0";
    case LLAMA_FTYPE_MOSTLY_Q2_K: return "Q2_K";
    case LLAMA_FTYPE_MOSTLY_Q2_K_S: return "Q2_K_S";
    case LLAMA_FTYPE_MOSTLY_Q3_K_S: return "Q3_K_S";
    case LLAMA_FTYPE_MOSTLY_Q3_K_M: return "Q3_K_M";
    case LLAMA_FTYPE_MOSTLY_Q3_K_L: return "Q3_K_L";
    case LLAMA_FTYPE_MOSTLY_Q4_K_S: return "Q4_K_S";
    case LLAMA_FTYPE_MOSTLY_Q4_K_M: return "Q4_K_M";
    case LLAMA_FTYPE_MOSTLY_Q5_K_S: return "Q5_K_S";
    case LLAMA_FTYPE_MOSTLY_Q5_K_M: return "Q5_K_M";
    case LLAMA_FTYPE_MOSTLY_Q6_K: return "Q6_K";
    case LLAMA_FTYPE_MOSTLY_IQ1_S: return "IQ1_S";
    case LLAMA_FTYPE_MOSTLY_IQ1_M: return "IQ1_M";
    case LLAMA_FTYPE_MOSTLY_IQ2_XXS: return "IQ2_XXS";
    case LLAMA_FTYPE_MOSTLY_IQ2_XS: return "IQ2_XS";
    case LLAMA_FTYPE_MOSTLY_IQ2_S: return "IQ2_S";
    case LLAMA_FTYPE_MOSTLY_IQ2_M: return "IQ2_M";
    case LLAMA_FTYPE_MOSTLY_IQ3_XXS: return "IQ3_XXS";
    case LLAMA_FTYPE_MOSTLY_IQ3_XS: return "IQ3_XS";
    case LLAMA_FTYPE_MOSTLY_IQ3_S: return "IQ3_S";
    case LLAMA_FTYPE_MOSTLY_IQ3_M: return "IQ3_M";
    case LLAMA_FTYPE_MOSTLY_IQ4_NL: return "IQ4_NL";
    case LLAMA_FTYPE_MOSTLY_IQ4_XS: return "IQ4_XS";
    case LLAMA_FTYPE_MOSTLY_TQ1_0: return "TQ1_0";
    case LLAMA_FTYPE_MOSTLY_TQ2_0: return "TQ2_0";
    case LLAMA_FTYPE_MOSTLY_MXFP4_MOE: return "MXFP4_MOE";
    case LLAMA_FTYPE_MOSTLY_NVFP4: return "NVFP4";
    case LLAMA_FTYPE_MOSTLY_Q1_0: return "Q1_0";
    case LLAMA_FTYPE_MOSTLY_Q2_0: return "Q2_0";
    default: return "unknown";
  }
}

nlohmann::json scalar(const gguf_context* ctx, int64_t id) {
  switch (gguf_get_kv_type(ctx, id)) {
    case GGUF_TYPE_UINT8: return gguf_get_val_u8(ctx, id);
    case GGUF_TYPE_INT8: return gguf_get_val_i8(ctx, id);
    case GGUF_TYPE_UINT16: return gguf_get_val_u16(ctx, id);
    case GGUF_TYPE_INT16: return gguf_get_val_i16(ctx, id);
    case GGUF_TYPE_UINT32: return gguf_get_val_u32(ctx, id);
    case GGUF_TYPE_INT32: return gguf_get_val_i32(ctx, id);
    case GGUF_TYPE_UINT64: return gguf_get_val_u64(ctx, id);
    case GGUF_TYPE_INT64: return gguf_get_val_i64(ctx, id);
    case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(ctx, id);
    case GGUF_TYPE_FLOAT64: return gguf_get_val_f64(ctx, id);
    case GGUF_TYPE_BOOL: return gguf_get_val_bool(ctx, id);
    case GGUF_TYPE_STRING: return gguf_get_val_str(ctx, id);
    default: return nullptr;
  }
}

}  // namespace

GgufSummary gguf_summary(const std::string& path) {
  gguf_init_params params{.no_alloc = true, .ctx = nullptr};
  gguf_context* ctx = gguf_init_from_file(path.c_str(), params);
  if (!ctx) {
    const std::string why = take_llama_errors();
    throw InvalidModelFile("model file '" + path + "' is not a readable GGUF file: " + (why.empty() ? "ggml gave no reason" : why));
  }
  // A header holds the vocabulary: 151,936 strings for qwen2's, megabytes
  // of small blocks that glibc would keep once freed (core/heap.h).
  Defer free_ctx([ctx] {
    gguf_free(ctx);
    release_free_heap();
  });
  GgufSummary s;
  for (int64_t id = 0; id < gguf_get_n_kv(ctx); ++id) {
    nlohmann::json v = scalar(ctx, id);
    // Text of any length is the header's (a chat template); it is not made
    // valid UTF-8 here, so a string that is not is left out.
    if (v.is_string()) {
      try {
        (void)v.dump();
      } catch (const nlohmann::json::exception&) {
        continue;
      }
    }
    if (!v.is_null()) s.scalars[gguf_get_key(ctx, id)] = std::move(v);
  }
  auto text = [&](const std::string& key) {
    const auto it = s.scalars.find(key);
    return it != s.scalars.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto number = [&](const std::string& key) -> int64_t {
    const auto it = s.scalars.find(key);
    return it != s.scalars.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  s.architecture = text("general.architecture");
  s.name = text("general.name");
  s.chat_template = text("tokenizer.chat_template");
  s.file_type = s.scalars.contains("general.file_type") ? file_type_name(number("general.file_type")) : "unknown";
  s.context_length = number(s.architecture + ".context_length");
  s.embedding_length = number(s.architecture + ".embedding_length");
  s.block_count = number(s.architecture + ".block_count");
  for (int64_t t = 0; t < gguf_get_n_tensors(ctx); ++t) {
    const ggml_type type = gguf_get_tensor_type(ctx, t);
    const size_t unit = ggml_type_size(type);
    if (unit == 0) continue;
    s.n_params += gguf_get_tensor_size(ctx, t) / unit * static_cast<uint64_t>(ggml_blck_size(type));
  }
  return s;
}

std::string parameter_size(uint64_t n) {
  char buf[32];
  const double v = static_cast<double>(n);
  if (v >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.1fB", v / 1e9);
  } else if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fK", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  }
  return buf;
}

}  // namespace reclaim
