#include "core/locked.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace reclaim {

std::vector<AddressRange> locked_ranges() {
  std::vector<AddressRange> out;
  int fd = ::open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  char line[512];
  size_t len = 0;
  AddressRange current;
  auto finish = [&] {
    line[len] = '\0';
    unsigned long lo = 0, hi = 0;
    if (std::strncmp(line, "VmFlags:", 8) == 0) {
      // Flags are two letters each, space separated.
      for (const char* p = line + 8; *p; ++p) {
        if (p[0] == 'l' && p[1] == 'o' && (p[2] == ' ' || p[2] == '\0') && p[-1] == ' ') {
          out.push_back(current);
          break;
        }
      }
    } else if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      current = {lo, hi};
    }
    len = 0;
  };
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[i] == '\n') finish();
      else if (len < sizeof line - 1) line[len++] = buf[i];
    }
  }
  if (len) finish();
  ::close(fd);
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
