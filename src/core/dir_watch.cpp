#include "core/dir_watch.h"

#include <dirent.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace reclaim {

namespace {

constexpr uint32_t kFolderEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF;
// The folder itself: also a folder made in it, to be watched from then on.
constexpr uint32_t kTopEvents = kFolderEvents | IN_CREATE;

bool is_gguf(const std::string& name) { return name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0; }

}  // namespace

SignalsAndFolder::SignalsAndFolder(Scope& scope, const sigset_t& signals, const std::string& dir,
                                   std::chrono::milliseconds quiet)
    : dir_(dir), quiet_(quiet) {
  Scope::Slot sig_slot = scope.reserve(Kind::fd, "signal fd");
  signal_fd_ = ::signalfd(-1, &signals, SFD_CLOEXEC);
  if (signal_fd_ < 0) throw Error(std::string("signalfd: ") + std::strerror(errno));
  sig_slot.arm(0, [fd = signal_fd_] { ::close(fd); });
  if (dir.empty()) return;
  Scope::Slot dir_slot = scope.reserve(Kind::fd, "models-dir watch");
  inotify_fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (inotify_fd_ < 0) throw Error(std::string("inotify_init1: ") + std::strerror(errno));
  dir_slot.arm(0, [fd = inotify_fd_] { ::close(fd); });
  top_ = ::inotify_add_watch(inotify_fd_, dir.c_str(), kTopEvents | IN_ONLYDIR);
  if (top_ < 0) throw Error("--models-dir '" + dir + "' cannot be watched: " + std::strerror(errno));
  // Its folders as they are now; a later one from its IN_CREATE or
  // IN_MOVED_TO. The watches are the inotify fd's: they go with it.
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") watch_inner(n);
    }
    ::closedir(d);
  }
}

void SignalsAndFolder::watch_inner(const std::string& name) {
  // Not a folder, gone already, or not ours to read: nothing to watch (a
  // folder the server cannot read holds no model it could serve).
  (void)::inotify_add_watch(inotify_fd_, (dir_ + "/" + name).c_str(), kFolderEvents | IN_ONLYDIR | IN_DONT_FOLLOW);
}

bool SignalsAndFolder::drain_folder() {
  alignas(inotify_event) char buf[4096];
  bool matters = false;
  for (;;) {
    const ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    if (n <= 0) return matters;  // EAGAIN: read all
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      if (e->mask & IN_Q_OVERFLOW) {
        matters = true;
        continue;
      }
      // An inner folder's own end is its parent's event too.
      if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        if (e->wd == top_) matters = true;
        continue;
      }
      const std::string name = e->len > 0 ? std::string(e->name) : std::string();
      if (e->wd == top_ && (e->mask & IN_ISDIR)) {
        // A model's folder made, moved in or out, or removed. One made may
        // already have its files (written before the watch): read it too.
        if (e->mask & (IN_CREATE | IN_MOVED_TO)) watch_inner(name);
        matters = true;
        continue;
      }
      if (e->mask & IN_CREATE) continue;  // a file is there once it is written
      if (is_gguf(name)) matters = true;
    }
  }
}

int SignalsAndFolder::wait() {
  bool changed = false;
  for (;;) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    const nfds_t n = inotify_fd_ >= 0 ? 2 : 1;
    // Once the folder changed: until it has been quiet for `quiet_`.
    const int timeout = changed ? static_cast<int>(quiet_.count()) : -1;
    const int r = ::poll(fds, n, timeout);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("poll: ") + std::strerror(errno));
    }
    if (r == 0) return 0;  // quiet again
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        return static_cast<int>(info.ssi_signo);
      }
    }
    if (n == 2 && (fds[1].revents & POLLIN) && drain_folder()) changed = true;
  }
}

}  // namespace reclaim
