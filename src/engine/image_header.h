// An image file's size as its header states it, read without decoding a
// pixel (engine/images.cpp bounds what it will decode by it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace reclaim {

struct ImageHeader {
  int64_t width = 0, height = 0;
  // Where reading failed, the decoder's reason ("too large": a size it
  // would refuse to allocate; "unknown image type": no format it knows).
  const char* why = "";
};

// False: no format the image decoder knows (PNG, JPEG, GIF, BMP, PSD, PIC,
// PNM, TGA), or a header it cannot read or would not decode.
bool image_header(const unsigned char* bytes, size_t len, ImageHeader* out);

}  // namespace reclaim
