// A prompt with images, as a batch decodes it: its text tokenized by mtmd
// around the image markers (image_marker(), where a chat's image parts
// were), and each image a run of tokens in the list that stand for its
// embeddings, one KV cell each.
//
// The stand-ins are negative (no vocabulary has them) and made from the
// image's SHA-256, a word of it a token in turn, so that two prompts share a
// prefix through an image only when they hold the same image: the prompt
// cache compares tokens, and a next turn that repeats a conversation with
// its images reuses its cells, as llama-server's cache does by the chunks'
// ids. A prefix that ends inside an image is cut back to the image's start
// (image_start_before): half an image's cells are never reused.
//
// Memory: the images are decoded (engine/images.h) and preprocessed to the
// projector's input (mtmd_tokenize: resized float pixels) on the request's
// scope; the decoded pixels go as soon as they are preprocessed, and the
// preprocessed ones with the request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <llama.h>

#include "core/scope.h"
#include "engine/images.h"

struct mtmd_input_chunk;

namespace reclaim {

class Projector;

// Where a prompt's text takes an image (mtmd's default marker): one for
// each image, in the images' order.
const char* image_marker();

struct ImageSpan {
  int32_t start = 0;     // its first stand-in's index in the prompt's tokens
  int32_t n_tokens = 0;  // its embeddings: cells in the KV cache
  int32_t n_pos = 0;     // positions it takes (fewer than its cells with M-RoPE)
  const mtmd_input_chunk* chunk = nullptr;
};

inline bool is_image_token(llama_token t) { return t < 0; }

class ImagePrompt {
 public:
  // `text` holds one image_marker() an image of `files`. Throws BadImage
  // (a marker count that differs from the images', an image the projector
  // cannot take, a prompt that ends with an image) and BadPrompt.
  ImagePrompt(Scope& scope, const Projector& projector, const std::string& text, const std::vector<std::string>& files,
              bool add_special, const ImageLimits& limits = {});
  ImagePrompt(const ImagePrompt&) = delete;
  ImagePrompt& operator=(const ImagePrompt&) = delete;

  const std::vector<llama_token>& tokens() const { return tokens_; }
  const std::vector<ImageSpan>& images() const { return images_; }
  // False with M-RoPE: an image takes fewer positions than cells, and the
  // prompt's positions are not its tokens' indices.
  bool positions_are_indices() const { return positions_are_indices_; }

 private:
  std::vector<llama_token> tokens_;
  std::vector<ImageSpan> images_;
  bool positions_are_indices_ = true;
};

// Where a prompt cut at `n` tokens may be cut: `n`, or, where `n` falls
// inside an image's run of stand-ins, that run's start.
int32_t image_start_before(const std::vector<llama_token>& tokens, int32_t n);

}  // namespace reclaim
