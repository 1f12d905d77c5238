// Deterministic random-weight image projectors for the test models: the
// files llama.cpp's mtmd library loads beside a text model (a model's
// "mmproj"), so that vision requests run end to end with no download.
//
// The type is llava-1.5's "mlp": a patch embedding, a position embedding and
// a two-layer perceptron to the text model's width. Of the types the pinned
// library knows it needs the fewest keys and tensors, no special tokens in
// the text model's vocabulary and no non-causal decode, and mtmd resizes any
// image to its square size. With no vision blocks its encoder is the patch
// embedding alone: an image is (image_size / patch_size)^2 embeddings.
#pragma once

#include <cstdint>
#include <string>

namespace reclaim {

struct TestProjectorSpec {
  int64_t n_embd_text = 0;  // the text model's n_embd, the projector's output width
  int64_t image_size = 64;  // pixels a side that every image is resized to
  int64_t patch_size = 16;
  int64_t width = 32;       // the vision embedding's width
  uint64_t seed = 1;
};

// Tokens (embeddings) one image takes in the text model's context.
inline int64_t test_projector_tokens(const TestProjectorSpec& s) {
  return (s.image_size / s.patch_size) * (s.image_size / s.patch_size);
}

// Writes the projector to `out` through a temporary file renamed at the end.
void make_test_projector(const TestProjectorSpec& spec, const std::string& out);

}  // namespace reclaim
