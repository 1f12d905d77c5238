// A histogram with fixed bucket bounds, as Prometheus reads one: for each
// bound, how many observations were at most it; their sum and count.
// Observations come from many threads; a reader takes a copy.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace reclaim {

struct HistogramCounts {
  std::vector<double> bounds;      // ascending; +Inf is implied after the last
  std::vector<uint64_t> at_most;   // cumulative, one a bound
  double sum = 0;
  uint64_t count = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) { counts_.bounds = std::move(bounds), counts_.at_most.assign(counts_.bounds.size(), 0); }
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void observe(double v) {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < counts_.bounds.size(); ++i) {
      if (v <= counts_.bounds[i]) ++counts_.at_most[i];
    }
    counts_.sum += v;
    ++counts_.count;
  }
  HistogramCounts counts() const {
    std::lock_guard lock(mu_);
    return counts_;
  }

 private:
  mutable std::mutex mu_;
  HistogramCounts counts_;
};

}  // namespace reclaim
