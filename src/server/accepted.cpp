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

// httplib 0.11 listens with a backlog of 5, built into Debian's library: a
// burst of clients past six while the accepting thread is off the CPU had
// their handshakes dropped and came in a second later, or three, or seven
// (SYN retransmits). Measured with a stopped server: SIGSTOP, sixteen
// connects, SIGCONT a moment later; ten of them answered after 1.03 s. The
// kernel caps this at net.core.somaxconn.
extern "C" int listen(int fd, int backlog) {
  return static_cast<int>(::syscall(SYS_listen, fd, backlog < SOMAXCONN ? SOMAXCONN : backlog));
}

namespace reclaim::server {

int take_accepted_socket() {
  const int s = t_accepted;
  t_accepted = -1;
  return s;
}

}  // namespace reclaim::server
