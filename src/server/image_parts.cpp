#include "server/image_parts.h"

#include <openssl/evp.h>

#include "engine/image_prompt.h"
#include "server/json_fields.h"

namespace reclaim::server {

std::string image_from_base64(const std::string& text, const std::string& field) {
  // Line breaks are allowed (MIME's); nothing else outside the alphabet.
  std::string clean;
  clean.reserve(text.size());
  for (const char c : text) {
    if (c == '\n' || c == '\r') continue;
    clean += c;
  }
  const auto bad = [&] { bad_field(field, "'" + field + "' is not base64 image data", "invalid_image"); };
  if (clean.empty() || clean.size() % 4 != 0) bad();
  std::string out(clean.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(clean.data()), static_cast<int>(clean.size()));
  if (n < 0) bad();
  // EVP_DecodeBlock counts the padding's bytes as data.
  size_t size = static_cast<size_t>(n);
  for (size_t k = clean.size(); k > 0 && clean[k - 1] == '=' && size > 0; --k) --size;
  out.resize(size);
  return out;
}

std::string image_from_url(const std::string& url, const std::string& field) {
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    bad_field(field, "'" + field + "' is a web address: this server fetches nothing on a client's behalf; send the image "
                                   "in the request as a data: URL (data:image/png;base64,...)",
              "invalid_image");
  }
  const size_t comma = url.find(',');
  if (url.rfind("data:", 0) != 0 || comma == std::string::npos) {
    bad_field(field, "'" + field + "' must be a data: URL (data:image/png;base64,...)", "invalid_image");
  }
  const std::string head = url.substr(5, comma - 5);
  if (head.size() < 7 || head.compare(head.size() - 7, 7, ";base64") != 0) {
    bad_field(field, "'" + field + "' must be a base64 data: URL (data:image/png;base64,...)", "invalid_image");
  }
  return image_from_base64(url.substr(comma + 1), field);
}

std::string image_place() { return image_marker(); }

void check_image_count(size_t n, const std::string& field) {
  const size_t most = ImageLimits{}.max_images;
  if (n > most) {
    bad_field(field, "the request brings " + std::to_string(n) + " images, more than the " + std::to_string(most) +
                         " a request may", "invalid_image");
  }
}

}  // namespace reclaim::server
