// The images a request brings, decoded for its model's projector. Each is
// bounded before a pixel is decoded: by count, by bytes, and by the size
// its header claims (a file that claims 65,535 x 65,535 pixels is refused by
// its claim, not by running out of memory). llama.cpp's mtmd decodes the rest
// (stb_image: PNG, JPEG, GIF, BMP, PSD, PIC, PNM, TGA) into bitmaps that are
// the request's: on its scope's ledger, freed with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/scope.h"
#include "engine/owners.h"

struct mtmd_bitmap;

namespace reclaim {

class Projector;

struct ImageLimits {
  size_t max_images = 16;               // in one request
  int64_t max_pixels = 4096LL * 4096;   // of one image, decoded (3 bytes each)
  // Of all of a request's images together: their bitmaps are held at once
  // until they are preprocessed (16 of the most would be 768 MiB from a few
  // megabytes of PNG); 4 of the largest, or 32 full-HD screenshots.
  int64_t max_request_pixels = 4 * 4096LL * 4096;
  size_t max_bytes = 32u << 20;         // of one image's file
};

// An image the request cannot have: not one, damaged, too large, too many,
// or for a model without a projector. The message names which image (from
// 1) and why; a server answers it with a 400.
class BadImage : public Error {
 public:
  using Error::Error;
};

// What can be refused of `files` without decoding a pixel: their count,
// their sizes, and what their headers claim. Throws BadImage.
void check_image_files(const std::vector<std::string>& files, const ImageLimits& limits = {});

class RequestImages {
 public:
  RequestImages() = default;
  // Decodes `files` (each an image file's bytes) into bitmaps under
  // `scope`. Throws BadImage; what was decoded before stays on the scope,
  // which frees it.
  RequestImages(Scope& scope, const Projector* projector, const std::vector<std::string>& files,
                const ImageLimits& limits = {});

  size_t size() const { return bitmaps_.size(); }
  bool empty() const { return bitmaps_.empty(); }
  // In the request's order, for mtmd_tokenize.
  const std::vector<const mtmd_bitmap*>& bitmaps() const { return bitmaps_; }
  // Each image's identity: the SHA-256 of its file, as llama-server keys
  // images in its prompt cache.
  const std::vector<std::string>& ids() const { return ids_; }
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<const mtmd_bitmap*> bitmaps_;
  std::vector<std::string> ids_;
  uint64_t bytes_ = 0;
};

}  // namespace reclaim
