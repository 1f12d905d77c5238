// stb_image's header readers, from the copy the pinned llama.cpp vendors for
// mtmd: the same decoder that will read the image says its size before a
// pixel is decoded. Compiled here as a private copy (STB_IMAGE_STATIC):
// mtmd's own is internal to its archive.
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wuseless-cast"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "engine/image_header.h"

#include <cstring>

namespace reclaim {

namespace {

bool starts(const unsigned char* bytes, size_t len, const char* magic, size_t n) {
  return len >= n && std::memcmp(bytes, magic, n) == 0;
}

}  // namespace

bool image_header(const unsigned char* bytes, size_t len, ImageHeader* out) {
  if (len == 0 || len > static_cast<size_t>(INT32_MAX)) return false;
  int x = 0, y = 0, comp = 0;
  // A file that names its format is read by that format's reader alone, so
  // that its reason is the one kept, not the last of the other formats'.
  int (*reader)(stbi__context*, int*, int*, int*) = nullptr;
  if (starts(bytes, len, "\x89PNG\r\n\x1a\n", 8)) reader = stbi__png_info;
  else if (starts(bytes, len, "\xFF\xD8", 2)) reader = stbi__jpeg_info;
  else if (starts(bytes, len, "GIF8", 4)) reader = stbi__gif_info;
  else if (starts(bytes, len, "BM", 2)) reader = stbi__bmp_info;
  bool ok;
  if (reader) {
    stbi__context s;
    stbi__start_mem(&s, bytes, static_cast<int>(len));
    ok = reader(&s, &x, &y, &comp) != 0;
  } else {
    ok = stbi_info_from_memory(bytes, static_cast<int>(len), &x, &y, &comp) != 0;
  }
  if (!ok) {
    const char* why = stbi_failure_reason();
    out->why = why ? why : "";
    return false;
  }
  out->width = x;
  out->height = y;
  return true;
}

}  // namespace reclaim
