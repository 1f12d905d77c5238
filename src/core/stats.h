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

// Runs `a` and `b` once each, the order alternating with the round, so that a
// slow spell of the machine falls on both sides of a side-by-side benchmark.
template <class A, class B>
void in_turn(int round, A&& a, B&& b) {
  if (round % 2 == 0) {
    a();
    b();
  } else {
    b();
    a();
  }
}

}  // namespace reclaim
