#include "core/child.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/defer.h"
#include "core/error.h"
#include "core/spawn.h"

namespace reclaim {

namespace {

using Clock = std::chrono::steady_clock;

// Appends to `keep` up to `max` bytes; past that, keeps the tail when
// `tail`, else the head.
void keep_bytes(std::string& keep, const char* data, size_t n, size_t max, bool tail) {
  keep.append(data, n);
  if (keep.size() <= max) return;
  if (tail) {
    keep.erase(0, keep.size() - max);
  } else {
    keep.resize(max);
  }
}

// Reads the child's stdout and stderr into `r` until both end, or kills it
// past its deadline or when its owner's stop fd is readable.
void read_until_end(pid_t pid, int out_fd, int err_fd, const ChildOptions& o, ChildResult& r) {
  const Clock::time_point deadline = o.timeout.count() > 0 ? Clock::now() + o.timeout : Clock::time_point::max();
  pollfd fds[3] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}, {o.stop_fd, POLLIN, 0}};
  int open_fds = 2;
  if (o.pass_stderr) {
    fds[1].fd = -1;  // its stderr is the parent's: nothing comes on this pipe
    open_fds = 1;
  }
  char buf[65536];
  size_t unseen = 0;  // where the stdout not yet given to on_line starts
  auto give_lines = [&] {
    if (!o.on_line) return;
    for (size_t nl; (nl = r.out.find('\n', unseen)) != std::string::npos; unseen = nl + 1) {
      o.on_line(r.out.substr(unseen, nl - unseen));
    }
  };
  while (open_fds > 0) {
    int wait_ms = -1;
    if (!r.timed_out && deadline != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        // Reading stops here rather than at the pipes' end: a process the
        // child started could keep them open after the child is gone.
        ::kill(pid, SIGKILL);
        r.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(std::min<long long>(left, INT_MAX));
    }
    const int n = ::poll(fds, 3, wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::kill(pid, SIGKILL);
      break;
    }
    if (fds[2].fd >= 0 && fds[2].revents != 0) {
      ::kill(pid, SIGKILL);
      r.stopped = true;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      if (i == 0) {
        keep_bytes(r.out, buf, static_cast<size_t>(got), o.max_stdout, false);
        give_lines();
      } else {
        keep_bytes(r.err, buf, static_cast<size_t>(got), o.max_stderr, true);
      }
    }
  }
}

// Waits for the child's end, and says how it ended in `r`.
void reap(pid_t pid, ChildResult& r) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
}

}  // namespace

std::string ChildResult::how_it_ended() const {
  if (timed_out) return "killed after running past its time limit";
  if (stopped) return "killed: its owner stopped";
  if (signal != 0) return "signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit " + std::to_string(exit_code);
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error(std::string("cannot find this program's path: ") + std::strerror(errno));
  buf[n] = '\0';
  return buf;
}

ChildResult run_child(const ChildOptions& o) {
  if (o.argv.empty()) throw Error("run_child: no program given");
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  Defer close_out([&] { ::close(out_pipe[0]); });
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[1]);
    throw Error(std::string("pipe: ") + std::strerror(errno));
  }
  Defer close_err([&] { ::close(err_pipe[0]); });

  SpawnOptions so;
  so.argv = o.argv;
  so.env = o.env;
  if (so.env.empty() && !o.env_add.empty()) {
    for (char** e = environ; *e; ++e) so.env.emplace_back(*e);
  }
  so.env.insert(so.env.end(), o.env_add.begin(), o.env_add.end());
  so.stdout_fd = out_pipe[1];
  if (!o.pass_stderr) so.stderr_fd = err_pipe[1];
  std::string error;
  const pid_t pid = spawn_process(so, &error);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0) throw Error(error);

  ChildResult r;
  read_until_end(pid, out_pipe[0], err_pipe[0], o, r);
  reap(pid, r);
  return r;
}

}  // namespace reclaim
