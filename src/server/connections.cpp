#include "server/connections.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "core/defer.h"

namespace reclaim::server {

namespace {

struct Current {
  Connections* owner = nullptr;
  void* conn = nullptr;
  int fd = -1;
};
thread_local Current t_current;

}  // namespace

Connections::Connections(Scope& parent, std::chrono::milliseconds read_timeout)
    : read_timeout_(read_timeout), scope_(parent, "connections") {
  watchdog_.start(scope_, "read-timeout watchdog", [this] { watch(); }, [this] { wake_watchdog(); });
}

Connections::~Connections() { scope_.close(); }

void Connections::wake_watchdog() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void Connections::serve(int socket, const std::function<void()>& serve) {
  const int dup = socket >= 0 ? ::fcntl(socket, F_DUPFD_CLOEXEC, 0) : -1;
  if (dup < 0) {
    serve();  // unwatched rather than refused
    return;
  }
  std::list<Conn>::iterator it;
  {
    std::lock_guard lock(mu_);
    it = conns_.insert(conns_.end(), Conn{dup, socket, Clock::now() + read_timeout_});
  }
  cv_.notify_all();
  t_current = {this, &*it, dup};
  // However httplib's work ends, the connection leaves the watch and its
  // duplicate is closed.
  Defer done([&] {
    t_current = {};
    {
      std::lock_guard lock(mu_);
      conns_.erase(it);
    }
    ::close(dup);
  });
  serve();
}

void Connections::set_deadline(Conn& c, Clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    c.deadline = deadline;
  }
  cv_.notify_all();
}

void Connections::answering() {
  if (!t_current.owner) return;
  t_current.owner->set_deadline(*static_cast<Conn*>(t_current.conn), Clock::time_point::max());
}

void Connections::answered() {
  if (!t_current.owner) return;
  Connections& self = *t_current.owner;
  self.set_deadline(*static_cast<Conn*>(t_current.conn), Clock::now() + self.read_timeout_);
}

bool Connections::client_gone() {
  if (t_current.fd < 0) return false;
  pollfd p{t_current.fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
  // Readable: the next pipelined request, or the end of the stream.
  char c;
  return ::recv(t_current.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void Connections::watch() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    for (Conn& c : conns_) {
      if (c.deadline <= now) {
        // httplib's blocked read returns and the thread lets the connection go.
        ::shutdown(c.fd, SHUT_RDWR);
        c.deadline = Clock::time_point::max();
        ++cut_;
      } else {
        next = std::min(next, c.deadline);
      }
    }
    if (next == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, next);
    }
  }
}

uint64_t Connections::cut() const {
  std::lock_guard lock(mu_);
  return cut_;
}

size_t Connections::open() const {
  std::lock_guard lock(mu_);
  return conns_.size();
}

int64_t Connections::fds() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const Conn& c : conns_) n += 1 + (::fcntl(c.socket, F_GETFD) != -1);
  return n;
}

}  // namespace reclaim::server
