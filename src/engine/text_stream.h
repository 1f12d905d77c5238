// Turns the byte pieces of generated tokens into text that is safe to emit:
// never half of a UTF-8 character (a byte-level BPE token may carry one byte
// of a 3-byte character), never the start of a stop string that may still
// complete, and always valid UTF-8 (a stray byte becomes U+FFFD, so a JSON
// writer downstream cannot fail on it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace reclaim {

// Stop strings of one request at most, and the longest: each token's text
// is matched against every stop's prefixes, a stop's length squared at
// worst, on the decode thread every request of the model shares.
inline constexpr size_t kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 256;

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops = {});

  // Adds a token's bytes; returns what can be emitted now. Once a stop string
  // has appeared, returns the text before it and stopped() is true; the stop
  // string and anything after it are dropped.
  std::string push(std::string_view bytes);
  // The end of generation: returns everything still held (an unfinished
  // character becomes U+FFFD).
  std::string finish();

  bool stopped() const { return stopped_index_ >= 0; }
  // The stop string that matched, or empty.
  const std::string& matched_stop() const;

 private:
  std::vector<std::string> stops_;
  std::string held_;
  int stopped_index_ = -1;
};

// `bytes` with every byte that is not part of a well-formed UTF-8 sequence
// replaced by U+FFFD.
std::string valid_utf8(std::string_view bytes);
// Length of a trailing, well-formed but unfinished UTF-8 sequence (0..3).
size_t unfinished_utf8_tail(std::string_view bytes);

}  // namespace reclaim
