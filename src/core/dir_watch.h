// Waiting for signals and for a folder's entries to change, in one poll:
// `reclaim serve` notices a model file put into --models-dir or taken out
// of it as it happens (inotify), rather than at the next request for it or
// the next SIGHUP, and still takes its stop and reload signals.
//
// A file is taken as there once it is whole: written and closed, or moved
// in (a download renamed into place), not when it is created. Events that
// come together (a copy's many writes, a folder of files moved at once) are
// one change: the watcher waits until the folder has been quiet for a while.
//
// The folder's own folders are watched too, one level down, as the folder
// is read: a model's folder (its GGUF and its projector, llama-server's
// router's layout) made or moved in, or a file put into one.
#pragma once

#include <signal.h>

#include <chrono>
#include <string>

#include "core/scope.h"

namespace reclaim {

class SignalsAndFolder {
 public:
  // `signals` must be blocked in every thread already. `dir` empty: signals
  // only. Both descriptors are on the ledger under `scope`. Throws Error.
  SignalsAndFolder(Scope& scope, const sigset_t& signals, const std::string& dir,
                   std::chrono::milliseconds quiet = std::chrono::milliseconds(250));

  // Blocks until a signal comes (returns it) or a .gguf file of the folder
  // or of a folder in it, or such a folder, was added, replaced or removed
  // and the folder went quiet (returns 0). A
  // change still settling when a signal comes is left to the signal's
  // handling: a reload reads the folder anyway, a stop needs nothing.
  int wait();

 private:
  bool drain_folder();  // reads what inotify has; whether any of it matters
  void watch_inner(const std::string& name);  // a folder in the folder

  std::string dir_;
  int signal_fd_ = -1, inotify_fd_ = -1, top_ = -1;
  std::chrono::milliseconds quiet_;
};

}  // namespace reclaim
