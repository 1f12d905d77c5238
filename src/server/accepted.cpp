#include "server/accepted.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {
thread_local int t_accepted = -1;
}

// Through the system call rather than libc's accept, which this definition
// hides. SOCK_CLOEXEC too: httplib 0.11 accepts without it, and a child
// started while a request runs (the vetting) would inherit the connection.
extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  const int s = static_cast<int>(::syscall(SYS_accept4, fd, addr, len, SOCK_CLOEXEC));
  if (s >= 0) t_accepted = s;
  return s;
}

namespace reclaim::server {

int take_accepted_socket() {
  const int s = t_accepted;
  t_accepted = -1;
  return s;
}

}  // namespace reclaim::server
