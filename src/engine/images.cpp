#include "engine/images.h"

#include <mtmd-helper.h>
#include <mtmd.h>

#include <string_view>

#include "core/size.h"
#include "engine/image_header.h"
#include "engine/llama_runtime.h"
#include "engine/projector.h"

namespace reclaim {

namespace {

std::string nth(size_t i) { return "image " + std::to_string(i + 1); }

// What the header says, and the bound it must keep, before any decoding:
// the pixels it claims.
int64_t check_claim(size_t i, const std::string& file, const ImageLimits& limits) {
  if (file.empty()) throw BadImage(nth(i) + " is empty");
  if (file.size() > limits.max_bytes) {
    throw BadImage(nth(i) + " is " + format_bytes(file.size()) + ", more than the " + format_bytes(limits.max_bytes) +
                   " an image may be");
  }
  ImageHeader h;
  const auto* bytes = reinterpret_cast<const unsigned char*>(file.data());
  if (!image_header(bytes, file.size(), &h)) {
    if (std::string_view(h.why) == "too large") {
      throw BadImage(nth(i) + " claims more pixels than an image may have (its decoder would not allocate them)");
    }
    const bool webp = file.size() >= 12 && file.compare(0, 4, "RIFF") == 0 && file.compare(8, 4, "WEBP") == 0;
    throw BadImage(nth(i) + (webp ? " is WebP, which this server's image decoder (stb_image) does not read"
                                  : " is not an image this server decodes (PNG, JPEG, GIF, BMP, PSD, PIC, PNM, TGA)"));
  }
  if (h.width <= 0 || h.height <= 0 || h.width * h.height > limits.max_pixels) {
    throw BadImage(nth(i) + " claims " + std::to_string(h.width) + " x " + std::to_string(h.height) +
                   " pixels, more than the " + std::to_string(limits.max_pixels) + " an image may have");
  }
  return h.width * h.height;
}

}  // namespace

void check_image_files(const std::vector<std::string>& files, const ImageLimits& limits) {
  if (files.size() > limits.max_images) {
    throw BadImage(std::to_string(files.size()) + " images, more than the " + std::to_string(limits.max_images) +
                   " a request may bring");
  }
  int64_t pixels = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    pixels += check_claim(i, files[i], limits);
    if (pixels > limits.max_request_pixels) {
      throw BadImage("the images up to " + nth(i) + " claim " + std::to_string(pixels) + " pixels, more than the " +
                     std::to_string(limits.max_request_pixels) + " a request's images may have together");
    }
  }
}

RequestImages::RequestImages(Scope& scope, const Projector* projector, const std::vector<std::string>& files,
                             const ImageLimits& limits) {
  if (files.empty()) return;
  if (!projector) throw BadImage("this model takes no images: it has no projector (its mmproj)");
  check_image_files(files, limits);
  bitmaps_.reserve(files.size());
  ids_.reserve(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& file = files[i];
    Scope::Slot slot = scope.reserve(Kind::buffer, nth(i));
    take_llama_errors();
    const mtmd_helper_bitmap_wrapper w =
        mtmd_helper_bitmap_init_from_buf(projector->get(), reinterpret_cast<const unsigned char*>(file.data()),
                                         file.size(), false, mtmd_helper_init_opt_default());
    if (w.video_ctx) mtmd_helper_video_free(w.video_ctx);  // never made without mtmd's video path
    if (!w.bitmap) {
      const std::string why = take_llama_errors();
      throw BadImage(nth(i) + " cannot be decoded" + (why.empty() ? "" : ": " + why));
    }
    mtmd_bitmap* b = w.bitmap;
    const uint64_t n = mtmd_bitmap_get_n_bytes(b);
    slot.arm(n, [b] { mtmd_bitmap_free(b); });
    bytes_ += n;
    bitmaps_.push_back(b);
    const char* id = mtmd_bitmap_get_id(b);
    ids_.emplace_back(id ? id : "");
  }
}

}  // namespace reclaim
