// Whether the suite runs on a sanitized build (scripts/test --sanitize sets
// RECLAIM_SANITIZED): there a crash is the sanitizer's report and exit, not a
// signal, and the sanitizer's shadow memory and quarantine are in the
// process's figures.
#pragma once

#include <cstdlib>

namespace reclaim::testing {

inline bool sanitized() { return std::getenv("RECLAIM_SANITIZED") != nullptr; }

}  // namespace reclaim::testing
