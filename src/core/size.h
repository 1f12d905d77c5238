// Byte sizes as people write them ("300MiB", "1.5G", "64KiB", "4096").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace reclaim {

// Throws Error naming the text when it is not a size.
int64_t parse_size(std::string_view text);
// "1.5 MiB", "-3.0 KiB", "512 B"
std::string format_bytes(int64_t bytes);

}  // namespace reclaim
