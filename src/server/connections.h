// The server's open connections: each one's socket, whether it is reading a
// request or being answered, and a watchdog that cuts a connection that
// takes longer than the read timeout to deliver a whole request.
//
// httplib's own read timeout applies to each read, so a client that sends a
// byte every few seconds (slowloris), or that keeps a connection open and
// idle, holds a thread for as long as it likes. Here the time from the
// connection's start, or from the end of its last answer, to the start of
// its next request's handler is bounded: past it the socket is shut down,
// and httplib's read returns and lets the thread go.
//
// A handler asks client_gone() to learn whether its client has left, which
// httplib 0.11 cannot tell a request that does not write (one waiting for its
// model, or not streamed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "core/scope.h"
#include "core/scoped_thread.h"

namespace reclaim::server {

class Connections {
 public:
  using Clock = std::chrono::steady_clock;
  // The watchdog thread is on the ledger in a scope "connections" under `parent`.
  Connections(Scope& parent, std::chrono::milliseconds read_timeout);
  ~Connections();
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  // Runs `serve` (httplib's work on one connection) with the connection
  // known to this thread. Takes a duplicate of `socket`, so that the
  // watchdog never shuts down a number that httplib has closed and the
  // kernel has given to another connection.
  void serve(int socket, const std::function<void()>& serve);

  // On the connection's thread: its request is being answered (the watchdog
  // leaves it be), or has been (it must send the next one in time).
  static void answering();
  static void answered();
  // On the connection's thread: the client closed or reset its side. False
  // when this thread serves no connection.
  static bool client_gone();

  uint64_t cut() const;  // connections cut by the watchdog since the start
  size_t open() const;
  // The descriptors the open connections hold now: each one's duplicate, and
  // its socket until httplib closes it (which it does a moment before the
  // connection leaves the watch).
  int64_t fds() const;

 private:
  struct Conn {
    int fd = -1;  // the duplicate
    int socket = -1;  // httplib's, which it closes before the duplicate is
    Clock::time_point deadline = Clock::time_point::max();  // max: being answered
  };
  void watch();
  void wake_watchdog() noexcept;  // to stop: watch() returns
  void set_deadline(Conn& c, Clock::time_point deadline);

  const std::chrono::milliseconds read_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<Conn> conns_;
  uint64_t cut_ = 0;
  bool stopping_ = false;
  Scope scope_;
  ScopedThread watchdog_;
};

}  // namespace reclaim::server
