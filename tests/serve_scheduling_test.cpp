// `reclaim serve` under traffic: requests for a second model wait for the
// busy one instead of failing, the control endpoints answer whatever the
// completions do, a client that leaves is noticed on every path, and a stream
// that waits keeps its connection alive.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>

#include <future>

#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

// These servers decode on one thread: ctest runs two tests at once on two
// cores, and two servers spinning on two threads each took 200 s over what
// takes 10 alone.
//
// Runs until its context is full: 4,088 tokens at --ctx 4096, about 4 s here
// (more on a loaded machine: the tests that drain it give --unload-timeout
// 10m, so that the drain never cuts it short).
// The context of the tests whose busy request runs until it is full: long
// enough to outlast what the test does meanwhile, and under a sanitizer (ten
// times slower) short enough to end within the test's time.
std::string busy_ctx() { return sanitized() ? "1024" : "4096"; }

json long_chat(bool stream = false) {
  json j = chat(8, stream);
  j.erase("max_tokens");
  return j;
}

json spm_completion(int max_tokens, bool stream = false) {
  return {{"model", "spm"}, {"prompt", "hello"}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
}

std::future<httplib::Result> post_async(int port, const std::string& path, const json& body) {
  return std::async(std::launch::async, [port, path, body] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    return c.Post(path.c_str(), body.dump(), "application/json");
  });
}

double seconds_for(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(ServeScheduling, ARequestForASecondModelWaitsForTheBusyOneThenSwaps) {
  Served s({"--threads", "1", "--ctx", busy_ctx(), "--max-loaded", "1", "--parallel", "1", "--unload-timeout", "10m",
            "--stream-keepalive", "100ms", "--stream-hold", "100ms"});
  auto busy = post_async(s.port(), "/v1/chat/completions", long_chat());
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  auto waiting = post_async(s.port(), "/v1/completions", spm_completion(4));
  RawClient stream(s.port());
  ASSERT_TRUE(stream.post("/v1/completions", spm_completion(4, true).dump()));
  ASSERT_TRUE(s.until([&] { return s.model("spm")["queued"] == 2 && s.model("bpe")["draining"] == true; }));
  EXPECT_EQ(s.model("spm")["line_position"], 1);
  // The waiting stream has its headers and keeps its connection alive.
  EXPECT_TRUE(stream.read_until(": waiting for model 'spm'", 30)) << stream.received();

  auto b = busy.get();
  ASSERT_TRUE(b);
  ASSERT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(json::parse(b->body)["choices"][0]["finish_reason"], "length");
  EXPECT_GT(json::parse(b->body)["usage"]["completion_tokens"].get<int>(), std::stoi(busy_ctx()) - 100)
      << "the busy request was cut short";
  auto w = waiting.get();
  ASSERT_TRUE(w);
  EXPECT_EQ(w->status, 200) << w->body;
  EXPECT_TRUE(stream.read_until("data: [DONE]", 60)) << stream.received();
  EXPECT_NE(stream.received().find("\"text\""), std::string::npos) << stream.received();
  stream.close();

  EXPECT_EQ(s.model("bpe")["state"], "unloaded");
  EXPECT_EQ(s.model("spm")["state"], "loaded");
  EXPECT_EQ(s.model("spm")["loads"], 1);
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric(m->body, "reclaim_swaps_total"), 1) << m->body;
  EXPECT_GE(metric(m->body, "reclaim_queue_wait_seconds_count"), 2) << m->body;
  EXPECT_GT(metric(m->body, "reclaim_queue_wait_seconds_sum"), 0) << m->body;
  s.expect_clean();
}

TEST(ServeScheduling, ControlAnswersAtOnceAndCompletionsPastTheQueueAre429AtOnce) {
  // One running and twelve waiting: more than the nine threads that used to
  // serve everything (/health then took 26.8 s behind 40 streams).
  Served s({"--threads", "1", "--ctx", "4096", "--parallel", "1", "--max-queue", "12"});
  // The running one is long (it is cancelled below); the waiting ones are
  // short, so that the test does not wait for thirteen long answers.
  std::vector<std::future<httplib::Result>> streams;
  streams.push_back(post_async(s.port(), "/v1/chat/completions", long_chat(true)));
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  for (int i = 0; i < 12; ++i) streams.push_back(post_async(s.port(), "/v1/chat/completions", chat(4, true)));
  ASSERT_TRUE(s.until([&] {
    const json m = s.model("bpe");
    return m["in_flight"] == 1 && m["queued"] == 12;
  }));
  for (const char* path : {"/health", "/metrics", "/v1/models", "/v1/resources"}) {
    httplib::Client c("127.0.0.1", s.port());
    int status = 0;
    const double t = seconds_for([&] {
      auto r = c.Get(path);
      status = r ? r->status : -1;
    });
    EXPECT_EQ(status, 200) << path;
    EXPECT_LT(t, 2.0) << path << " waited behind the completions";
  }
  httplib::Client c("127.0.0.1", s.port());
  const auto t0 = std::chrono::steady_clock::now();
  auto refused = c.Post("/v1/chat/completions", chat(4).dump(), "application/json");
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_error(refused, 429, "12 waiting");
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  EXPECT_LT(t, 2.0);
  // The long one ends cancelled, as a stream (finish_reason "length" and
  // [DONE]); the waiting ones then load the model again and run.
  ASSERT_EQ(s.post("/v1/models/unload", {{"model", "bpe"}, {"mode", "cancel"}})->status, 200);
  for (auto& f : streams) {
    auto r = f.get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
  }
  s.expect_clean();
}

TEST(ServeScheduling, ABurstOfClientsIsTakenWhileTheServerIsOffTheCpu) {
  // Stopped, the server accepts nothing: the kernel finishes a handshake only
  // for a connection its listening backlog has room for, and drops the rest
  // (they came in a second or more later, by retransmission). The burst is
  // more than the client threads of the test above.
  Served s({}, false);
  constexpr int kBurst = 64;
  ASSERT_EQ(::kill(s.pid(), SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{s.pid()};
  std::vector<int> fds;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(s.port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < kBurst; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    ASSERT_TRUE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 || errno == EINPROGRESS);
  }
  auto connected = [&] {
    int n = 0;
    for (const int fd : fds) {
      pollfd p{fd, POLLOUT, 0};
      int err = 1;
      socklen_t len = sizeof err;
      if (::poll(&p, 1, 0) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) ++n;
    }
    return n;
  };
  EXPECT_TRUE(s.until([&] { return connected() == kBurst; }, 10)) << connected() << " of " << kBurst << " connected";
  ::kill(s.pid(), SIGCONT);
  // Each is then served.
  const std::string ask = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (const int fd : fds) EXPECT_EQ(::send(fd, ask.data(), ask.size(), MSG_NOSIGNAL), static_cast<ssize_t>(ask.size()));
  for (const int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 30000), 1);
    char head[16] = {};
    EXPECT_GT(::recv(fd, head, sizeof head - 1, 0), 0);
    EXPECT_EQ(std::string(head).rfind("HTTP/1.1 200", 0), 0u) << head;
    ::close(fd);
  }
  s.expect_clean();
}

TEST(ServeScheduling, AClientThatLeavesIsNoticedRunningOrWaitingStreamedOrNot) {
  // A stream starts once it has waited 100 ms (--stream-hold), as one that
  // waits long does.
  Served s({"--threads", "1", "--ctx", "4096", "--max-loaded", "1", "--parallel", "1", "--unload-timeout", "10m",
            "--stream-hold", "100ms"});
  auto metrics = [&] {
    auto m = s.http().Get("/metrics");
    return m ? m->body : std::string();
  };
  const std::string gone_total = "reclaim_requests_total{outcome=\"client_gone\"}";
  // Running, not streamed: cancelled within a decode step, where it would
  // have run for seconds more and counted as ok.
  {
    RawClient c(s.port());
    ASSERT_TRUE(c.post("/v1/chat/completions", long_chat().dump()));
    ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
    c.close();
    ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 0; }, 10));
    EXPECT_EQ(metric(metrics(), gone_total), 1);
    EXPECT_EQ(s.model("bpe")["batch"]["active"], 0);
  }
  auto busy = post_async(s.port(), "/v1/chat/completions", long_chat());
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  // Waiting for the model's one slot, not streamed.
  {
    RawClient c(s.port());
    ASSERT_TRUE(c.post("/v1/chat/completions", chat(4).dump()));
    ASSERT_TRUE(s.until([&] { return s.model("bpe")["queued"] == 1; }));
    c.close();
    ASSERT_TRUE(s.until([&] { return s.model("bpe")["queued"] == 0; }, 10));
  }
  // Waiting for a swap, not streamed, then streamed: the busy model is
  // chosen to drain, and admits again once nobody waits for the other.
  for (bool stream : {false, true}) {
    RawClient c(s.port());
    ASSERT_TRUE(c.post("/v1/completions", spm_completion(4, stream).dump()));
    ASSERT_TRUE(s.until([&] { return s.model("spm")["queued"] == 1 && s.model("bpe")["draining"] == true; }));
    if (stream) EXPECT_TRUE(c.read_until("HTTP/1.1 200", 10)) << c.received();
    c.close();
    ASSERT_TRUE(s.until([&] { return s.model("spm")["queued"] == 0 && s.model("bpe")["draining"] == false; }, 10));
  }
  // A stream past --stream-hold is between its two waits for a moment (out
  // of the line: nobody queued, nothing draining), so the wait above may end
  // before the stream notices its client left: wait for the count itself.
  ASSERT_TRUE(s.until([&] { return metric(metrics(), gone_total) == 4; }, 10)) << metrics();
  EXPECT_EQ(metric(metrics(), "reclaim_queue_client_gone_total"), 3);
  EXPECT_EQ(s.model("spm")["loads"], 0) << "a model was loaded for clients that had left";
  // The busy request was not cut for them: it still runs on the model it
  // started on. Its end is not this test's (minutes under TSan): cancelled.
  EXPECT_EQ(s.model("bpe")["state"], "loaded");
  EXPECT_EQ(s.model("bpe")["in_flight"], 1);
  EXPECT_EQ(s.model("bpe")["loads"], 1);
  ASSERT_EQ(s.post("/v1/models/unload", {{"model", "bpe"}, {"mode", "cancel"}})->status, 200);
  auto b = busy.get();
  expect_error(b, 503, "cancelled");
  s.expect_clean();
}

TEST(ServeScheduling, AStreamWhoseWaitFailsEndsWithAnErrorEventAndDone) {
  // Started after 500 ms of waiting (--stream-hold), the stream carries the
  // wait's failure as its last event. Its wait before the start and its wait
  // after are one: counted once, and --queue-timeout runs from its start
  // (were it counted from the stream's start, the wait would be 1.5 s).
  Served s({"--threads", "1", "--ctx", busy_ctx(), "--max-loaded", "1", "--parallel", "1", "--unload-timeout", "10m",
            "--queue-timeout", "1s", "--stream-hold", "500ms"});
  auto busy = post_async(s.port(), "/v1/chat/completions", long_chat());
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  auto m0 = s.http().Get("/metrics");  // the busy request waited for bpe's load
  ASSERT_TRUE(m0);
  RawClient c(s.port());
  ASSERT_TRUE(c.post("/v1/completions", spm_completion(4, true).dump()));
  ASSERT_TRUE(c.read_until("data: [DONE]", 30)) << c.received();
  const std::string& got = c.received();
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  EXPECT_NE(got.find("\"code\":\"queue_timeout\""), std::string::npos) << got;
  EXPECT_LT(got.find("queue_timeout"), got.find("data: [DONE]"));
  c.close();
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  auto more = [&](const char* sample) { return metric(m->body, sample) - metric(m0->body, sample); };
  EXPECT_EQ(more("reclaim_queue_wait_seconds_count"), 1) << m->body;
  EXPECT_GE(more("reclaim_queue_wait_seconds_sum"), 1.0) << m->body;
  EXPECT_LT(more("reclaim_queue_wait_seconds_sum"), 1.45) << m->body;
  EXPECT_EQ(more("reclaim_queue_timeouts_total"), 1) << m->body;
  auto b = busy.get();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  EXPECT_EQ(s.model("spm")["loads"], 0);
  s.expect_clean();
}

// Within --stream-hold (30 s by default), a stream waits for its model before
// it starts, so that what ends the wait is a status: here the queue timeout,
// a 503 with no stream at all. The prompt that overflows the context of a
// model another stream is loading is the same: a 400 before any event.
TEST(ServeScheduling, AStreamRefusedWhileItWaitsGetsItsStatusBeforeItStarts) {
  Served s({"--threads", "1", "--ctx", busy_ctx(), "--max-loaded", "1", "--parallel", "1", "--unload-timeout", "10m",
            "--queue-timeout", "1s"});
  auto busy = post_async(s.port(), "/v1/chat/completions", long_chat());
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  auto refused = s.post("/v1/completions", spm_completion(4, true));
  expect_error(refused, 503, "--queue-timeout");
  EXPECT_EQ(refused->get_header_value("Content-Type").rfind("application/json", 0), 0u);
  auto b = busy.get();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  // One stream loads spm; another, too long for its context, arrives while
  // it loads and is refused as it would be once spm is loaded.
  s.post("/v1/models/unload", {{"model", "bpe"}});
  auto loading = post_async(s.port(), "/v1/completions", spm_completion(4, true));
  ASSERT_TRUE(s.until([&] { return s.model("spm")["state"] != "unloaded"; }));
  json overflow = spm_completion(4, true);
  overflow["max_tokens"] = std::stoi(busy_ctx()) + 1;
  expect_error(s.post("/v1/completions", overflow), 400, "context");
  auto l = loading.get();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->status, 200);
  expect_error(s.post("/v1/completions", overflow), 400, "context");
  s.expect_clean();
}

TEST(ServeScheduling, ASlowClientIsCutAtTheReadTimeoutAndOthersAreServed) {
  Served s({"--read-timeout", "1s"});
  RawClient slow(s.port());
  ASSERT_TRUE(slow.connected());
  // A byte every 200 ms: never long enough between bytes for a per-read
  // timeout (httplib's is 5 s), and never a whole request.
  const std::string request = "GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(200, 'a') + "\r\n\r\n";
  bool cut = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (char ch : request) {
    if (!slow.send(std::string(1, ch)) || slow.closed_by_server(0.2)) {
      cut = true;
      break;
    }
  }
  const double held = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(cut) << "the server waited for the whole dribbled request";
  EXPECT_LT(held, 5.0);
  auto h = s.http().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_GE(metric(m->body, "reclaim_http_connections_cut_total"), 1) << m->body;
  s.expect_clean();
}
