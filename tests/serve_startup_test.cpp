// `reclaim serve` that cannot start says why in one line and exits 2: no
// terminate, no hang, nothing half-started left running.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "cli_support.h"

using namespace reclaim::testing;

namespace {

void expect_one_line_exit_2(const Result& r, const std::string& says) {
  EXPECT_EQ(r.status, 2) << r.out;
  // The notes before it (a verdict logged by the background vetting) are
  // on their own lines; the error is the last line and names the cause.
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("reclaim: error: ", 0), 0u) << r.out;
  EXPECT_NE(last.find(says), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
}

TEST(ServeStartup, APreloadThatFailsIsAnError) {
  // Truncated inside its tensor data, as an interrupted download is.
  const std::string bad = temp_path("startup-truncated.gguf");
  std::ifstream in(spm(), std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(bad, std::ios::binary) << good.substr(0, good.size() / 2);
  expect_one_line_exit_2(run("serve --port 0 -m " + bad + ":x --preload x"), "--preload x: ");
}

TEST(ServeStartup, APortInUseIsAnError) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(s, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  expect_one_line_exit_2(run("serve --port " + std::to_string(port) + " -m " + spm()), "Address already in use");
  ::close(s);
}

TEST(ServeStartup, AMissingModelsDirIsAnError) {
  expect_one_line_exit_2(run("serve --port 0 --models-dir " + temp_path("no-such-folder")), "--models-dir");
}

TEST(ServeStartup, AMissingModelFileIsAnError) {
  expect_one_line_exit_2(run("serve --port 0 -m " + temp_path("no-such.gguf") + ":x"), "no-such.gguf");
}

}  // namespace
