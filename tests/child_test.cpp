#include "core/child.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "core/error.h"

namespace reclaim {
namespace {

using namespace std::chrono_literals;

ChildResult sh(const std::string& script, std::chrono::milliseconds timeout = 0ms) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.timeout = timeout;
  return run_child(o);
}

TEST(Child, CollectsItsOutputAndExitCode) {
  ChildResult r = sh("echo out; echo err >&2; exit 3");
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.how_it_ended(), "exit 3");
}

TEST(Child, ASignalIsAResultNotAnError) {
  ChildResult r = sh("echo 'about to abort' >&2; kill -ABRT $$");
  EXPECT_EQ(r.signal, SIGABRT);
  EXPECT_NE(r.how_it_ended().find("signal 6"), std::string::npos);
  EXPECT_EQ(r.err, "about to abort\n");
}

TEST(Child, IsKilledPastItsTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  ChildResult r = sh("sleep 30", 200ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(Child, IsKilledWhenItsStopFdIsWritten) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::thread stopper([&] {
    // The child is running (or about to); either way the stop ends it.
    (void)!::write(p[1], "x", 1);
  });
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 30"};
  o.stop_fd = p[0];
  const auto t0 = std::chrono::steady_clock::now();
  ChildResult r = run_child(o);
  stopper.join();
  EXPECT_TRUE(r.stopped);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ::close(p[0]);
  ::close(p[1]);
}

TEST(Child, KeepsTheTailOfALongStderr) {
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line$i >&2; i=$((i+1)); done; echo last >&2"};
  o.max_stderr = 64;
  ChildResult r = run_child(o);
  EXPECT_EQ(r.err.size(), 64u);
  EXPECT_EQ(r.err.substr(r.err.size() - 5), "last\n");
}

TEST(Child, GetsNoFdOfOursButItsThree) {
  // Opened without O_CLOEXEC, as a library might: still not the child's.
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 3);
  ChildResult r = sh("ls /proc/self/fd");
  ::close(fd);
  // ls itself has its directory open: 0, 1, 2 and that one.
  int count = 0;
  for (char c : r.out) count += c == '\n';
  EXPECT_EQ(count, 4) << r.out;
}

TEST(Child, AProgramThatCannotStartIsAnError) {
  ChildOptions o;
  o.argv = {"/nonexistent/program"};
  // glibc's posix_spawn reports a failed exec as its own error.
  try {
    (void)run_child(o);
    ADD_FAILURE() << "a missing program started";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/program"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace reclaim
