// Streams a /proc file line by line through stack buffers: /proc/self/maps
// and smaps can be far larger than any fixed size, and the probes that read
// them must not allocate on the heap they measure.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>

namespace reclaim {

// Calls on_line(line, length) for each line, NUL-terminated, cut at 4095
// bytes. Returns false if the file cannot be opened.
template <class F>
bool for_each_proc_line(const char* path, F&& on_line) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[65536];
  char line[4096];
  size_t len = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[i] == '\n') {
        line[len] = '\0';
        on_line(line, len);
        len = 0;
      } else if (len < sizeof line - 1) {
        line[len++] = buf[i];
      }
    }
  }
  if (len > 0) {
    line[len] = '\0';
    on_line(line, len);
  }
  ::close(fd);
  return true;
}

}  // namespace reclaim
