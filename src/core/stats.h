// Small statistics for benchmarks and reports.
#pragma once

#include <algorithm>
#include <vector>

namespace reclaim {

// The middle value (the mean of the two middle ones for an even count); 0
// for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace reclaim
