// Starting a program: the one posix_spawn of the project. run_child
// (core/child.h) runs one to its end and collects what it said; the benches
// and the tests start servers and CLIs with this directly. Header-only, so
// that test harnesses can use it without linking reclaim_core (whose
// allocator would then be theirs).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace reclaim {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path
  std::vector<std::string> env;   // NAME=value each; empty: this process's environment
  // Where the child's streams go: an fd of ours (dup'd; a pipe's write end),
  // or -1: stdin from /dev/null, stdout and stderr ours.
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  std::string stdout_file;        // if set: stdout written to this file (truncated)
  bool stderr_to_stdout = false;  // stderr where stdout goes
  bool close_other_fds = true;    // the child gets no other fd of ours
};

// The child's pid; throws nothing: returns -1 with `error` set when it cannot
// be started.
inline pid_t spawn_process(const SpawnOptions& o, std::string* error = nullptr) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return pid_t{-1};
  };
  if (o.argv.empty()) return fail("no program given");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (o.stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, o.stdin_fd, STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  if (!o.stdout_file.empty()) {
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, o.stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  } else if (o.stdout_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, o.stdout_fd, STDOUT_FILENO);
  }
  if (o.stderr_to_stdout) {
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  } else if (o.stderr_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, o.stderr_fd, STDERR_FILENO);
  }
  if (o.close_other_fds) posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  std::vector<std::string> args = o.argv, env = o.env;
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return fail("cannot start '" + o.argv[0] + "': " + std::strerror(rc));
  return pid;
}

}  // namespace reclaim
