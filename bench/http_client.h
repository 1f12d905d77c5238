// A small HTTP/1.1 client on raw sockets and a server child process, for the
// benchmarks that talk to servers (bench/swap, bench/soak): no library, so
// that a stream's first bytes are seen when they are sent.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/spawn.h"

extern char** environ;

namespace reclaim::bench {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw Error(std::string("no free port: ") + std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One HTTP/1.1 request on its own connection ("Connection: close"); the body
// is handed to `on_body` piece by piece as it arrives, de-chunked, so that a
// stream's first token is seen when it is sent. Returns the status.
// `hang_up`, asked after each piece: true closes the connection there, as a
// client that leaves does (the status read so far is returned). `headers`:
// more header lines, each ending in CRLF.
inline int http(int port, const std::string& method, const std::string& path, const std::string& body,
         const std::function<void(const std::string&)>& on_body, const std::function<bool()>& hang_up = nullptr,
         const std::string& headers = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers +
                          "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd);
      return 0;
    }
    off += static_cast<size_t>(n);
  }
  if (hang_up && hang_up()) {  // gone before any answer
    ::close(fd);
    return 0;
  }
  std::string in, head;
  int status = 0;
  bool chunked = false, headers_done = false;
  size_t chunk_left = 0;  // bytes of the current chunk still to come
  bool in_chunk = false, last_chunk = false;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (!headers_done) {
      const size_t end = in.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      head = in.substr(0, end);
      in.erase(0, end + 4);
      headers_done = true;
      if (head.size() > 12) status = std::atoi(head.c_str() + 9);
      std::string lower = head;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      chunked = lower.find("transfer-encoding: chunked") != std::string::npos;
    }
    if (last_chunk) continue;  // the trailer
    if (!chunked) {
      on_body(in);
      in.clear();
      if (hang_up && hang_up()) break;
      continue;
    }
    for (;;) {
      if (in_chunk) {
        const size_t take = std::min(chunk_left, in.size());
        if (take > 0) on_body(in.substr(0, take));
        in.erase(0, take);
        chunk_left -= take;
        if (chunk_left > 0) break;
        if (in.size() < 2) break;
        in.erase(0, 2);  // CRLF after the chunk
        in_chunk = false;
      }
      const size_t eol = in.find("\r\n");
      if (eol == std::string::npos) break;
      chunk_left = std::stoul(in.substr(0, eol), nullptr, 16);
      in.erase(0, eol + 2);
      if (chunk_left == 0) {
        last_chunk = true;
        break;
      }
      in_chunk = true;
    }
    if (hang_up && hang_up()) break;
  }
  ::close(fd);
  return status;
}

inline json http_json(int port, const std::string& method, const std::string& path, const json& body = nullptr) {
  std::string got;
  const int status = http(port, method, path, body.is_null() ? "" : body.dump(), [&](const std::string& s) { got += s; });
  if (status != 200) throw Error(method + " " + path + " -> " + std::to_string(status) + ": " + got.substr(0, 300));
  return json::parse(got);
}

// A streamed POST: the JSON of each `data: {...}` server-sent event, handed
// to `on_event` as it arrives. Returns the status; the raw body goes to
// `all` (for a message when the status is not 200).
inline int post_sse(int port, const std::string& path, const std::string& body,
                    const std::function<void(const json& event)>& on_event, std::string& all) {
  std::string pending;
  return http(port, "POST", path, body, [&](const std::string& piece) {
    pending += piece;
    all += piece;
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: {", 0) != 0) continue;
      const json j = json::parse(event.substr(6), nullptr, false);
      if (!j.is_discarded()) on_event(j);
    }
  });
}

// The llama-server a benchmark compares against, or an error naming the
// script that builds it.
inline void require_llama_server(const std::string& path, const std::string& script) {
  if (path.empty() || ::access(path.c_str(), X_OK) != 0) {
    throw Error("no llama-server at '" + path + "': run " + script + ", which builds it");
  }
}

// A server under test: a child process, its port, and how it names model states.
struct ServerProcess {
  std::string name;
  std::vector<std::string> argv;
  std::string log;
  pid_t pid = 0;
  int port = 0;
  std::function<std::string(const json& model)> state;  // "loaded", "unloaded", …
  std::string unload_path;

  void start() {
    SpawnOptions so;
    so.argv = argv;
    so.stdout_file = log;
    so.stderr_to_stdout = true;
    std::string error;
    pid = spawn_process(so, &error);
    if (pid < 0) throw Error(error);
    const Clock::time_point t0 = Clock::now();
    while (http(port, "GET", "/health", "", [](const std::string&) {}) != 200) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pid = 0;
        throw Error(name + " exited at start-up; its log: " + log);
      }
      if (ms_since(t0) > 60000) throw Error(name + " did not answer /health within 60 s; its log: " + log);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void stop() noexcept {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    pid = 0;
  }
  std::string model_state(const std::string& id) {
    const json list = http_json(port, "GET", "/v1/models");
    for (const json& m : list["data"]) {
      if (m.value("id", "") == id) return state(m);
    }
    throw Error(name + " does not list model '" + id + "': " + list.dump().substr(0, 400));
  }
  void wait_state(const std::string& id, const std::string& want) {
    const Clock::time_point t0 = Clock::now();
    while (model_state(id) != want) {
      if (ms_since(t0) > 60000) throw Error(name + ": model '" + id + "' is not " + want + " after 60 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
};

}  // namespace reclaim::bench
