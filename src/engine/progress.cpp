#include "engine/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

namespace reclaim {

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::function<bool(float)> load_progress(std::string label, const CancelToken* cancel, bool draw) {
  // Shared so that the callback stays copyable, as std::function wants.
  auto last = std::make_shared<int>(-1);
  return [label = std::move(label), cancel, draw, last](float p) {
    if (cancel && cancel->cancelled()) {
      if (draw && *last >= 0) std::fputs("\n", stderr);
      return false;
    }
    if (!draw) return true;
    const int pct = static_cast<int>(std::lround(std::clamp(p, 0.0f, 1.0f) * 100));
    if (pct == *last) return true;
    *last = pct;
    constexpr int kWidth = 30;
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < pct * kWidth / 100 ? '#' : '.';
    bar[kWidth] = '\0';
    // \r redraws the line; the last update ends it.
    std::fprintf(stderr, "\rloading %s [%s] %3d%%%s", label.c_str(), bar, pct, pct == 100 ? "\n" : "");
    std::fflush(stderr);
    return true;
  };
}

}  // namespace reclaim
