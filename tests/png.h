// PNG files made by the tests themselves: RGB, 8 bits, deflate's stored
// blocks (no compression), so that nothing but the C++ library is needed.
#pragma once

#include <cstdint>
#include <string>

namespace reclaim::testing {

inline uint32_t crc32_of(const std::string& bytes) {
  uint32_t table[256];
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[n] = c;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline void put_be32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xFF);
}

inline void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_be32(out, crc32_of(body));
}

// A PNG whose header says width x height; its pixels are the given
// width x height (`pixels_w` x `pixels_h` when given: a file that lies about
// its size) coloured by `shade`.
inline std::string png(uint32_t width, uint32_t height, int shade = 0, uint32_t pixels_w = 0, uint32_t pixels_h = 0) {
  if (pixels_w == 0) pixels_w = width;
  if (pixels_h == 0) pixels_h = height;
  std::string raw;  // each row: filter type 0, then RGB
  for (uint32_t y = 0; y < pixels_h; ++y) {
    raw += '\0';
    for (uint32_t x = 0; x < pixels_w * 3; ++x) raw += static_cast<char>((x * 5 + y * 11 + static_cast<uint32_t>(shade) * 37) % 256);
  }
  std::string z = "\x78\x01";
  for (size_t at = 0; at < raw.size() || at == 0;) {
    const size_t n = std::min<size_t>(65535, raw.size() - at);
    const bool last = at + n >= raw.size();
    z += static_cast<char>(last ? 1 : 0);
    z += static_cast<char>(n & 0xFF);
    z += static_cast<char>(n >> 8);
    z += static_cast<char>(~n & 0xFF);
    z += static_cast<char>((~n >> 8) & 0xFF);
    z.append(raw, at, n);
    at += n;
    if (last) break;
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  put_be32(z, (b << 16) | a);
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, RGB, deflate, no filter choice, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", "");
  return out;
}

}  // namespace reclaim::testing
