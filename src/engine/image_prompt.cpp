#include "engine/image_prompt.h"

#include <mtmd.h>

#include <algorithm>
#include <atomic>
#include <cctype>

#include "core/heap.h"
#include "engine/generate.h"
#include "engine/llama_runtime.h"
#include "engine/projector.h"

namespace reclaim {

namespace {

// The k-th stand-in of an image whose id is `id` (the hex SHA-256 mtmd's
// helper gives a decoded file): its words in turn, each 30 bits, made
// negative and kept off LLAMA_TOKEN_NULL (-1). An image without an id gets
// a number of its own, so that it is never taken for another.
llama_token stand_in(const std::string& id, uint32_t own, size_t k) {
  uint32_t word = own;
  const size_t words = id.size() / 8;
  if (words > 0) {
    const size_t at = (k % words) * 8;
    word = static_cast<uint32_t>(std::stoul(id.substr(at, 8), nullptr, 16));
  }
  return -2 - static_cast<llama_token>(word & 0x3fffffffu);
}

bool hex_id(const char* id) {
  if (!id || !*id) return false;
  for (const char* p = id; *p; ++p) {
    if (!std::isxdigit(static_cast<unsigned char>(*p))) return false;
  }
  return true;
}

}  // namespace

const char* image_marker() { return mtmd_default_marker(); }

int32_t image_start_before(const std::vector<llama_token>& tokens, int32_t n) {
  const auto size = static_cast<int32_t>(tokens.size());
  if (n <= 0 || n >= size) return n;
  while (n > 0 && is_image_token(tokens[static_cast<size_t>(n - 1)]) && is_image_token(tokens[static_cast<size_t>(n)])) --n;
  return n;
}

ImagePrompt::ImagePrompt(Scope& scope, const Projector& projector, const std::string& text,
                         const std::vector<std::string>& files, bool add_special, const ImageLimits& limits) {
  static std::atomic<uint32_t> unnamed{0};
  size_t markers = 0;
  const std::string marker = image_marker();
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + marker.size())) ++markers;
  if (markers != files.size()) {
    throw BadImage("the prompt has " + std::to_string(markers) + " places for an image (" + marker + ") and the request " +
                   std::to_string(files.size()) + " images");
  }
  Scope::Slot slot = scope.reserve(Kind::buffer, "images, preprocessed");
  mtmd_input_chunks* chunks = nullptr;
  uint64_t bytes = 0;
  {
    // The decoded pixels are needed only until they are preprocessed.
    Scope decoded(scope, "images");
    const RequestImages images(decoded, &projector, files, limits);
    mtmd_input_text in{text.c_str(), text.size(), add_special, true};
    take_llama_errors();
    const int64_t before = static_cast<int64_t>(heap_stats().in_use);
    chunks = mtmd_input_chunks_init();
    if (!chunks) throw std::bad_alloc();
    const int32_t rc = mtmd_tokenize(projector.get(), chunks, &in, images.bitmaps().data(), images.size());
    if (rc != 0) {
      const std::string why = take_llama_errors();
      mtmd_input_chunks_free(chunks);
      throw BadImage(std::string("the images cannot be prepared for this model's projector") +
                     (why.empty() ? " (mtmd_tokenize: " + std::to_string(rc) + ")" : ": " + why));
    }
    // What mtmd made: the preprocessed pixels mostly. The heap's growth,
    // where other threads allocate too; an estimate, not a count.
    bytes = static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(heap_stats().in_use) - before));
  }
  slot.arm(bytes, [chunks] { mtmd_input_chunks_free(chunks); });
  positions_are_indices_ = !mtmd_decode_use_mrope(projector.get());
  const size_t n = mtmd_input_chunks_size(chunks);
  for (size_t i = 0; i < n; ++i) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
    const mtmd_input_chunk_type type = mtmd_input_chunk_get_type(c);
    if (type == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      size_t n_text = 0;
      const llama_token* t = mtmd_input_chunk_get_tokens_text(c, &n_text);
      tokens_.insert(tokens_.end(), t, t + n_text);
      continue;
    }
    if (type != MTMD_INPUT_CHUNK_TYPE_IMAGE) throw BadImage("the projector made a part that is not an image");
    ImageSpan span;
    span.start = static_cast<int32_t>(tokens_.size());
    span.n_tokens = static_cast<int32_t>(mtmd_input_chunk_get_n_tokens(c));
    span.n_pos = static_cast<int32_t>(mtmd_input_chunk_get_n_pos(c));
    span.chunk = c;
    const char* id = mtmd_input_chunk_get_id(c);
    const std::string key = hex_id(id) ? id : "";
    const uint32_t own = unnamed.fetch_add(1);
    for (int32_t k = 0; k < span.n_tokens; ++k) tokens_.push_back(stand_in(key, own, static_cast<size_t>(k)));
    images_.push_back(span);
  }
  if (tokens_.empty()) throw BadPrompt("the prompt is empty (no tokens)");
  // The last token's logits give the first one generated: it must be text.
  if (is_image_token(tokens_.back())) {
    throw BadImage("the prompt ends with an image: the text after it (a chat's assistant turn) is missing");
  }
}

}  // namespace reclaim
