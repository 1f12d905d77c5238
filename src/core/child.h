// Runs a program in a child process and collects what it said and how it
// ended. The one place in reclaim that starts processes: the audit's sides and
// the vetting of model files both come here.
//
// The child gets no fd of ours but its stdin (/dev/null), stdout and stderr
// (pipes to us): a listening socket or a model's mmap fd of the parent must
// not outlive the parent in a child that hangs.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace reclaim {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path
  // The child's environment; empty: this process's own, with `env_add`
  // after it (a later NAME=value wins).
  std::vector<std::string> env;
  std::vector<std::string> env_add;
  // Killed (SIGKILL) once it has run this long; 0: no limit.
  std::chrono::milliseconds timeout{0};
  // What is kept of each stream; the rest is read and dropped, so that a
  // child that writes without end neither blocks nor fills our memory.
  size_t max_stdout = 16u << 20;
  size_t max_stderr = 64u << 10;  // the tail is kept: an abort's message is last
  bool pass_stderr = false;        // the child writes to our stderr instead
  // Called with each line of stdout (without its newline) as it comes, on
  // the thread that runs the child: how a child says where it has got to.
  // Lines past max_stdout are not seen.
  std::function<void(const std::string&)> on_line;
  // When this fd becomes readable (another thread wrote to a pipe, or closed
  // it), the child is killed: how its owner stops it early. -1: never.
  int stop_fd = -1;
};

struct ChildResult {
  int exit_code = -1;   // when it exited
  int signal = 0;       // when a signal ended it
  bool timed_out = false;
  bool stopped = false;  // killed through stop_fd
  std::string out, err;
  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exit 3", "signal 6 (Aborted)", "killed after running past its time limit".
  std::string how_it_ended() const;
};

// Throws Error when the child cannot be started; a child that fails or dies is
// a result, not an error.
ChildResult run_child(const ChildOptions& options);

// The path of this program (/proc/self/exe resolved).
std::string self_exe();

}  // namespace reclaim
