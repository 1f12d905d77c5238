#include "core/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace reclaim {

int64_t parse_size(std::string_view text) {
  std::string s(text);
  const char* p = s.c_str();
  char* end = nullptr;
  double v = std::strtod(p, &end);
  if (end == p || !std::isfinite(v) || v < 0) throw Error("'" + s + "' is not a size (try 300MiB, 1.5GiB or 4096)");
  std::string unit;
  for (const char* q = end; *q; ++q) {
    if (!std::isspace(static_cast<unsigned char>(*q))) unit.push_back(static_cast<char>(std::tolower(*q)));
  }
  double mult;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb") mult = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb") mult = 1024.0 * 1024 * 1024 * 1024;
  else throw Error("'" + s + "' has an unknown unit '" + unit + "' (use B, KiB, MiB, GiB or TiB)");
  return static_cast<int64_t>(std::llround(v * mult));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace reclaim
