#include "core/locked.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/proc_lines.h"

namespace reclaim {

std::vector<AddressRange> locked_ranges() {
  std::vector<AddressRange> out;
  AddressRange current;
  for_each_proc_line("/proc/self/smaps", [&](const char* line, size_t) {
    unsigned long lo = 0, hi = 0;
    if (std::strncmp(line, "VmFlags:", 8) == 0) {
      // Flags are two letters each, space separated; "lo" is VM_LOCKED.
      for (const char* p = line + 8; *p; ++p) {
        if (p[-1] == ' ' && p[0] == 'l' && p[1] == 'o' && (p[2] == ' ' || p[2] == '\0')) {
          out.push_back(current);
          break;
        }
      }
    } else if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      current = {lo, hi};
    }
  });
  std::sort(out.begin(), out.end(), [](const AddressRange& a, const AddressRange& b) { return a.begin < b.begin; });
  return out;
}

std::vector<AddressRange> ranges_added(const std::vector<AddressRange>& before, const std::vector<AddressRange>& after) {
  std::vector<AddressRange> out;
  for (AddressRange r : after) {
    // Subtract every `before` range from r.
    std::vector<AddressRange> pieces = {r};
    for (const AddressRange& b : before) {
      std::vector<AddressRange> next;
      for (const AddressRange& p : pieces) {
        if (b.end <= p.begin || b.begin >= p.end) {
          next.push_back(p);
          continue;
        }
        if (p.begin < b.begin) next.push_back({p.begin, b.begin});
        if (b.end < p.end) next.push_back({b.end, p.end});
      }
      pieces = std::move(next);
    }
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

uint64_t unlock_remains(const std::vector<AddressRange>& ranges) {
  if (ranges.empty()) return 0;
  uint64_t unlocked = 0;
  for (const AddressRange& l : locked_ranges()) {
    for (const AddressRange& r : ranges) {
      uintptr_t b = std::max(l.begin, r.begin), e = std::min(l.end, r.end);
      if (b >= e) continue;
      if (::munlock(reinterpret_cast<void*>(b), e - b) == 0) unlocked += e - b;
    }
  }
  return unlocked;
}

}  // namespace reclaim
