#include "engine/test_projector.h"

#include <ggml.h>
#include <gguf.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "core/defer.h"
#include "core/error.h"

namespace reclaim {

namespace {

// The same splitmix64 stream for the same seed and tensor: a file's bytes
// depend only on its spec.
float weight(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<float>(z >> 40) / static_cast<float>(1ull << 24) - 0.5f) * 0.2f;
}

}  // namespace

void make_test_projector(const TestProjectorSpec& s, const std::string& out) {
  if (s.n_embd_text <= 0) throw Error("a test projector needs the text model's width");
  if (s.patch_size <= 0 || s.image_size < s.patch_size || s.image_size % s.patch_size != 0) {
    throw Error("a test projector's image size must be a multiple of its patch size");
  }
  const int64_t d = s.width, e = s.n_embd_text, p = s.patch_size, n_pos = test_projector_tokens(s);
  struct Shape {
    const char* name;
    std::vector<int64_t> ne;
  };
  const std::vector<Shape> shapes = {
      {"v.patch_embd.weight", {p, p, 3, d}},  // a conv2d kernel
      {"v.position_embd.weight", {d, n_pos}},
      {"mm.0.weight", {d, e}},
      {"mm.0.bias", {e}},
      {"mm.2.weight", {e, e}},  // its second dimension is the width mtmd checks against the text model's
      {"mm.2.bias", {e}},
  };
  size_t bytes = 0;
  for (const Shape& t : shapes) {
    size_t n = 1;
    for (int64_t x : t.ne) n *= static_cast<size_t>(x);
    bytes += n * sizeof(float) + ggml_tensor_overhead() + 64;
  }
  ggml_init_params ip{bytes, nullptr, false};
  ggml_context* ctx = ggml_init(ip);
  if (!ctx) throw Error("cannot allocate " + std::to_string(bytes) + " bytes for a test projector");
  Defer free_ctx([ctx] { ggml_free(ctx); });
  gguf_context* g = gguf_init_empty();
  Defer free_g([g] { gguf_free(g); });
  gguf_set_val_str(g, "general.architecture", "clip");
  gguf_set_val_str(g, "general.name", "reclaim-test-projector");
  gguf_set_val_bool(g, "clip.has_vision_encoder", true);
  gguf_set_val_str(g, "clip.projector_type", "mlp");
  gguf_set_val_bool(g, "clip.use_gelu", true);
  gguf_set_val_u32(g, "clip.vision.embedding_length", static_cast<uint32_t>(d));
  gguf_set_val_u32(g, "clip.vision.attention.head_count", 1);
  gguf_set_val_u32(g, "clip.vision.feed_forward_length", static_cast<uint32_t>(4 * d));
  gguf_set_val_u32(g, "clip.vision.block_count", 0);
  gguf_set_val_u32(g, "clip.vision.projection_dim", static_cast<uint32_t>(e));
  gguf_set_val_f32(g, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
  gguf_set_val_u32(g, "clip.vision.image_size", static_cast<uint32_t>(s.image_size));
  gguf_set_val_u32(g, "clip.vision.patch_size", static_cast<uint32_t>(p));
  const float mean[3] = {0.5f, 0.5f, 0.5f}, stdev[3] = {0.5f, 0.5f, 0.5f};
  gguf_set_arr_data(g, "clip.vision.image_mean", GGUF_TYPE_FLOAT32, mean, 3);
  gguf_set_arr_data(g, "clip.vision.image_std", GGUF_TYPE_FLOAT32, stdev, 3);
  uint64_t state = s.seed * 0x2545F4914F6CDD1Dull;
  for (const Shape& t : shapes) {
    ggml_tensor* x = ggml_new_tensor(ctx, GGML_TYPE_F32, static_cast<int>(t.ne.size()), t.ne.data());
    ggml_set_name(x, t.name);
    auto* data = static_cast<float*>(x->data);
    for (int64_t i = 0; i < ggml_nelements(x); ++i) data[i] = weight(state);
    gguf_add_tensor(g, x);
  }
  const std::string tmp = out + ".tmp";
  if (!gguf_write_to_file(g, tmp.c_str(), false)) {
    std::remove(tmp.c_str());
    throw Error("cannot write the test projector '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + out + "'");
  }
}

}  // namespace reclaim
