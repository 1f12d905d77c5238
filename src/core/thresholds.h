// What counts as memory given back: the residues `reclaim audit` accepts
// after a cycle, and that the server's dashboard shows green within.
#pragma once

#include <cstdint>

namespace reclaim {

struct Thresholds {
  int64_t anon_residue = 1 << 20;  // bytes (anon + swap), after any cycle
  int64_t anon_growth = 64 << 10;  // bytes, last cycle's residue minus the first's
  int64_t locked = 0;              // bytes
  int64_t fds = 0, threads = 0, maps = 0;
  int64_t device = 0;              // bytes
};

}  // namespace reclaim
