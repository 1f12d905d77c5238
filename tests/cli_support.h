// Runs the real reclaim binary, as a user would, for the CLI tests.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/spawn.h"
#include "temp_path.h"

#ifndef RECLAIM_BIN
#error "RECLAIM_BIN must name the reclaim binary"
#endif

extern char** environ;

namespace reclaim::testing {

struct Result {
  int status = -1;  // exit status; 128 + N if killed by signal N
  std::string out;  // stdout and stderr together (run) or stdout only (Child)
  std::string err;
};

inline int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1; }

// `env` ("NAME=VALUE ..."): set for this run only.
inline Result run_with_env(const std::string& env, const std::string& args) {
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(RECLAIM_BIN) + " " + args + " 2>&1";
  Result r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = exit_code(::pclose(p));
  return r;
}

inline Result run(const std::string& args) { return run_with_env("", args); }

// A reclaim process with stdout and stderr on pipes, for tests that signal it
// while it runs.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    reclaim::SpawnOptions so;
    so.argv = {RECLAIM_BIN};
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.stdout_fd = out[1];
    so.stderr_fd = err[1];
    so.close_other_fds = false;  // as a user's shell would start it
    std::string error;
    pid_ = reclaim::spawn_process(so, &error);
    EXPECT_GT(pid_, 0) << error;
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    ::close(out_);
    ::close(err_);
  }

  // Reads until stdout has at least `n` bytes or `seconds` pass.
  bool wait_for_output(size_t n, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (result_.out.size() < n && std::chrono::steady_clock::now() < end) pump(100);
    return result_.out.size() >= n;
  }
  // Reads until stdout contains `text` or `seconds` pass.
  bool wait_for_text(const std::string& text, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (result_.out.find(text) == std::string::npos && std::chrono::steady_clock::now() < end) pump(100);
    return result_.out.find(text) != std::string::npos;
  }
  // Reads until stderr contains `text` or `seconds` pass.
  bool wait_for_err(const std::string& text, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (result_.err.find(text) == std::string::npos && std::chrono::steady_clock::now() < end) pump(100);
    return result_.err.find(text) != std::string::npos;
  }
  const Result& so_far() const { return result_; }
  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }
  Result wait() {
    while (pump(100)) {
    }
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    result_.status = exit_code(st);
    return result_;
  }

 private:
  // false once both pipes are at EOF.
  bool pump(int timeout_ms) {
    std::array<pollfd, 2> fds = {{{out_, POLLIN, 0}, {err_, POLLIN, 0}}};
    if (out_eof_) fds[0].fd = -1;
    if (err_eof_) fds[1].fd = -1;
    if (out_eof_ && err_eof_) return false;
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return true;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? out_eof_ : err_eof_) = true;
      } else {
        (i == 0 ? result_.out : result_.err).append(buf, static_cast<size_t>(n));
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  bool out_eof_ = false, err_eof_ = false;
  Result result_;
};

inline std::string model(const std::string& vocab) {
  std::string path = reclaim::testing::temp_path("cli_" + vocab + ".gguf");
  std::string args = "make-test-model --out " + path + " --vocab " + vocab +
                     (vocab == "bpe" ? " --embd 64 --layers 2 --type q8_0" : " --embd 128 --layers 2 --type f16");
  Result r = run(args);
  EXPECT_EQ(r.status, 0) << r.out;
  return path;
}

inline const std::string& spm() {
  static const std::string p = model("spm");
  return p;
}
inline const std::string& bpe() {
  static const std::string p = model("bpe");
  return p;
}

// The spm test model again, with an image projector of its width.
struct SeeingModel {
  std::string model, mmproj;
};
inline const SeeingModel& seeing() {
  static const SeeingModel m = [] {
    SeeingModel s{reclaim::testing::temp_path("cli_seeing.gguf"), reclaim::testing::temp_path("cli_seeing-mmproj.gguf")};
    Result r = run("make-test-model --out " + s.model + " --vocab spm --embd 128 --layers 2 --type f16 --mmproj " + s.mmproj);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    return s;
  }();
  return m;
}

}  // namespace reclaim::testing
