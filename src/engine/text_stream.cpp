#include "engine/text_stream.h"

#include <algorithm>

namespace reclaim {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Expected length of the sequence starting with `lead`, 0 if it cannot start one.
size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// RFC 3629's table: the second byte's range depends on the lead (no overlong
// forms, no surrogates, nothing above U+10FFFF).
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

bool continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Bytes of s[i..] that form a valid prefix of a sequence (up to its length).
size_t valid_prefix(std::string_view s, size_t i, size_t len) {
  const auto lead = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  while (n < len && i + n < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    if (n == 1 ? !second_byte_ok(lead, b) : !continuation(b)) break;
    ++n;
  }
  return n;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = sequence_length(static_cast<unsigned char>(s[i]));
    if (len == 1) {
      out += s[i++];
      continue;
    }
    if (len != 0 && valid_prefix(s, i, len) == len) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    out += kReplacement;
    // A lead with some valid continuation bytes is one broken character.
    i += len == 0 ? 1 : valid_prefix(s, i, len);
  }
  return out;
}

size_t unfinished_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if (continuation(b)) continue;
    const size_t len = sequence_length(b);
    return len > back && valid_prefix(s, i, len) == back ? back : 0;
  }
  return 0;
}

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

const std::string& TextStream::matched_stop() const {
  static const std::string kNone;
  return stopped() ? stops_[static_cast<size_t>(stopped_index_)] : kNone;
}

std::string TextStream::push(std::string_view bytes) {
  if (stopped()) return {};
  held_.append(bytes);
  // The earliest stop string wins; a stop can only begin in what was held or
  // just added, since everything before was already checked.
  size_t cut = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    size_t at = held_.find(stops_[i]);
    if (at < cut) {
      cut = at;
      stopped_index_ = static_cast<int>(i);
    }
  }
  if (cut != std::string::npos) {
    std::string out = valid_utf8(std::string_view(held_).substr(0, cut));
    held_.clear();
    return out;
  }
  // Hold back the longest tail that may still grow into a stop string, or an
  // unfinished character, whichever is longer.
  size_t hold = unfinished_utf8_tail(held_);
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > hold; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  std::string out = valid_utf8(std::string_view(held_).substr(0, held_.size() - hold));
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string TextStream::finish() {
  std::string out = valid_utf8(held_);
  held_.clear();
  return out;
}

}  // namespace reclaim
