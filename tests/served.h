// A `reclaim serve` child on a free loopback port, for the server's end-to-end
// tests, and the helpers they share.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli_support.h"
#include "sanitized.h"

namespace reclaim::testing {

using nlohmann::json;

// What /v1/resources' ledger holds beyond the server's standing entries (the
// accept loop, its signal fd and folder watch, the HTTP threads, the
// keep-alive reaper, the vetter's thread and stop pipe): one line each, empty
// once every model and request is gone.
inline std::vector<std::string> held_beyond_standing(const json& ledger) {
  std::vector<std::string> out;
  for (const json& e : ledger["entries"]) {
    const std::string owner = e["owner"], kind = e["kind"];
    const bool standing = (kind == "thread" && (owner == "serve" || owner == "http" || owner == "http/workers" ||
                                                 owner == "http/connections" || owner == "registry")) ||
                          (owner == "vetter" && (kind == "thread" || kind == "fd")) ||
                          (owner == "serve" && kind == "fd") ||  // the signal fd, the models-dir watch
                          (owner == "runtime" && kind == "device_state");
    if (!standing) out.push_back(kind + " " + owner + " '" + e["label"].get<std::string>() + "'");
  }
  return out;
}

// The server's figures read from outside it, in /proc/PID.
struct Outside {
  int64_t anon = 0, threads = 0, fds = 0, maps = 0;
  static Outside of(pid_t pid) {
    Outside o;
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(maps, line);) ++o.maps;
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("RssAnon:", 0) == 0) o.anon = std::stoll(line.substr(8)) * 1024;
      if (line.rfind("Threads:", 0) == 0) o.threads = std::stoll(line.substr(8));
    }
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
      (void)e;
      ++o.fds;
    }
    return o;
  }
};

class Served {
 public:
  // `two_models`: spm and bpe are served (named so) besides what `extra` adds.
  explicit Served(std::vector<std::string> extra = {}, bool two_models = true) {
    std::vector<std::string> args = {"serve", "--port", "0"};
    if (two_models) args.insert(args.end(), {"-m", spm() + ":spm", "-m", bpe() + ":bpe"});
    if (std::find(extra.begin(), extra.end(), "--ctx") == extra.end()) args.insert(args.end(), {"--ctx", "256"});
    args.insert(args.end(), extra.begin(), extra.end());
    child_ = std::make_unique<Child>(args);
    // Given a certificate, it serves HTTPS, and the client trusts whatever
    // certificate it shows (a test's is self-signed).
    const bool https = std::find(extra.begin(), extra.end(), "--ssl-cert-file") != extra.end();
    const std::string scheme = https ? "https" : "http";
    const std::string mark = "listening on " + scheme + "://127.0.0.1:";
    EXPECT_TRUE(child_->wait_for_text(mark, 60)) << child_->so_far().err;
    const std::string& out = child_->so_far().out;
    port_ = std::stoi(out.substr(out.find(mark) + mark.size()));
    client_ = std::make_unique<httplib::Client>(scheme + "://127.0.0.1:" + std::to_string(port_));
    client_->enable_server_certificate_verification(false);
    client_->set_read_timeout(120, 0);
    outside_ = Outside::of(child_->pid());
  }
  httplib::Client& http() { return *client_; }
  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  json get(const std::string& path) {
    auto r = client_->Get(path.c_str());
    EXPECT_TRUE(r) << path;
    return r ? json::parse(r->body) : json();
  }
  httplib::Result post(const std::string& path, const json& body, httplib::Headers h = {}) {
    return client_->Post(path.c_str(), h, body.dump(), "application/json");
  }
  // A POST that has to succeed; its reply's JSON.
  json post_json(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r) << path;
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  json model(const std::string& name) {
    const json list = get("/v1/models");
    for (const json& m : list["data"]) {
      if (m["id"] == name) return m;
    }
    return {};
  }
  // Polls the server (it has no push channel) until `pred` holds. Under a
  // sanitizer the server runs several times slower (a first load under TSan,
  // with another server on the other core, took over 30 s): five times the
  // bound.
  template <class P>
  bool until(P pred, double seconds = 30) {
    if (sanitized()) seconds *= 5;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return pred();
  }
  // Unloads everything, then checks that nothing is left.
  void expect_clean() {
    for (const char* m : {"spm", "bpe"}) post("/v1/models/unload", {{"model", m}});
    // A connection of an earlier request may still be closing on the server
    // (under TSan, with another server on the other core, it took over 10 s),
    // and the vetting of the folder's models that start-up began may still
    // be running (on CI's two cores it outlasted a 2 s test), and a worker
    // thread that started for a burst may be between its last job and its
    // join (threads 1, maps 2: its stack and guard, once in a full run).
    json r;
    until([&] {
      r = get("/v1/resources");
      return r["residue"]["fds"] == 0 && r["residue"]["threads"] == 0 &&
             (sanitized() || r["residue"]["maps"] == 0) && held_beyond_standing(r["ledger"]).empty();
    }, 60);
    EXPECT_EQ(held_beyond_standing(r["ledger"]), std::vector<std::string>{}) << r["ledger"].dump();
    EXPECT_EQ(r["residue"]["threads"], 0) << r["residue"].dump();
    EXPECT_EQ(r["residue"]["fds"], 0) << r["residue"].dump();
    // A sanitizer's shadow memory and quarantine are not the server's.
    if (!sanitized()) {
      EXPECT_LE(r["residue"]["anon"].get<int64_t>(), 1 << 20) << r["residue"].dump();
      EXPECT_EQ(r["residue"]["maps"], 0) << r["residue"].dump();
    }
    // And from outside, with this client's connection closed. (At or below:
    // a model preloaded before the outside look is gone now.)
    client_->stop();
    Outside now;
    until([&] {
      now = Outside::of(child_->pid());
      return now.fds <= outside_.fds && now.threads <= outside_.threads;
    }, 60);
    EXPECT_LE(now.fds, outside_.fds);
    EXPECT_LE(now.threads, outside_.threads);
    if (!sanitized()) EXPECT_LE(now.anon - outside_.anon, 1 << 20);
  }
  void signal(int sig) { child_->signal(sig); }
  // Waits for a line of the server's log (stderr).
  bool logged(const std::string& text, double seconds = 60) { return child_->wait_for_err(text, seconds); }
  // What the server wrote on stderr so far.
  std::string log() {
    (void)child_->wait_for_err("\x01", 0);
    return child_->so_far().err;
  }
  Result stop() {
    child_->signal(SIGTERM);
    return child_->wait();
  }

 private:
  std::unique_ptr<Child> child_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
  Outside outside_;
};

// Runs one of the tests' Node scripts with `args`: what it printed, and its
// exit status in `status`.
inline std::string run_node_script(const std::string& script, const std::string& args, int& status) {
  const std::string cmd = "node " + script + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    status = -1;
    return "popen failed";
  }
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = exit_code(::pclose(p));
  return out;
}

// The same with the OpenAI SDK in `sdk`, against the server on `port`.
inline std::string run_sdk_script(const std::string& script, const std::string& sdk, int port, const std::string& model,
                                  int& status) {
  return run_node_script(script, sdk + " http://127.0.0.1:" + std::to_string(port) + "/v1 " + model, status);
}

inline json chat(int max_tokens, bool stream = false) {
  return {{"model", "bpe"},
          {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream}};
}

inline void expect_error(const httplib::Result& r, int status, const std::string& says) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  json j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"].contains("type"));
  EXPECT_NE(j["error"]["message"].get<std::string>().find(says), std::string::npos) << r->body;
}

// An error in Ollama's shape: {"error": "message"}.
inline void expect_ollama_error(const httplib::Result& r, int status, const std::string& says) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const json j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_string()) << r->body;
  EXPECT_NE(j["error"].get<std::string>().find(says), std::string::npos) << r->body;
}

// Posts a streamed request on a raw socket, reads up to its first SSE chunk
// and closes the connection, as a client that goes away does.
// `mark`: what the first chunk holds (an SSE event's; an NDJSON line's).
// `headers`: more header lines, each ending in \r\n.
inline void leave_after_first_chunk(int port, const json& request, const std::string& path = "/v1/chat/completions",
                                    const std::string& mark = "data: ", const std::string& headers = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = request.dump();
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.find(mark) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  // Left in a reply, not after a refusal or an error event.
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_EQ(got.find("\"error\""), std::string::npos) << got;
  ::close(fd);
}

// A client on a raw socket, for what httplib's client does not do: leave in
// the middle, send byte by byte, send what is not HTTP.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // A POST with a JSON body, as one write.
  bool post(const std::string& path, const std::string& body) {
    return send("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  // Reads until `text` has come, the server closes, or `seconds` pass.
  bool read_until(const std::string& text, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (got_.find(text) == std::string::npos && !eof_ && std::chrono::steady_clock::now() < end) pump(50);
    return got_.find(text) != std::string::npos;
  }
  // Reads until the server closes the connection or `seconds` pass.
  bool closed_by_server(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!eof_ && std::chrono::steady_clock::now() < end) pump(50);
    return eof_;
  }
  const std::string& received() const { return got_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void pump(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return;
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
    } else {
      got_.append(buf, static_cast<size_t>(n));
    }
  }
  int fd_ = -1;
  bool connected_ = false, eof_ = false;
  std::string got_;
};

// A sample of /metrics, by its name and labels as written ("name{labels}").
inline double metric(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 2));
}

}  // namespace reclaim::testing
