// A registry on loopback that speaks the protocol Ollama's registry and
// Hugging Face serve models over (Docker's distribution API): a manifest at
// /v2/NS/MODEL/manifests/TAG and blobs at /v2/NS/MODEL/blobs/sha256:HEX,
// Range requests answered with 206, over HTTP or HTTPS. It can misbehave as
// networks do: send other bytes, drop the connection halfway, or redirect
// blobs to another server (a CDN).
#pragma once

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "store_layouts.h"

namespace reclaim::testing {

class FakeRegistry {
 public:
  enum class Mode { normal, corrupt, drop_halfway, redirect, slow, trickle };

  // HTTPS where a certificate and key are given.
  explicit FakeRegistry(const std::string& cert = "", const std::string& key = "") {
    if (cert.empty()) server_ = std::make_unique<httplib::Server>();
    else server_ = std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str());
    server_->Get(R"(/v2/([^/]+)/([^/]+)/manifests/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      const auto it = manifests_.find(req.matches[1].str() + "/" + req.matches[2].str() + ":" + req.matches[3].str());
      if (it == manifests_.end()) {
        res.status = 404;
        res.set_content(R"({"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]})", "application/json");
        return;
      }
      res.set_content(it->second, "application/vnd.docker.distribution.manifest.v2+json");
    });
    server_->Get(R"(/v2/([^/]+)/([^/]+)/blobs/sha256:([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      serve_blob(req, res, req.matches[3].str(), true);
    });
    // Where a redirected blob is fetched from.
    server_->Get(R"(/cdn/([0-9a-f]{64}))", [this](const httplib::Request& req, httplib::Response& res) {
      serve_blob(req, res, req.matches[1].str(), false);
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // Bound and listening already; stop() only stops a server that runs.
    while (!server_->is_running()) std::this_thread::yield();
  }
  ~FakeRegistry() {
    server_->stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  void set_mode(Mode m) { mode_ = m; }
  // Another registry whose /cdn/HEX serves this one's redirected blobs.
  void redirect_blobs_to(const FakeRegistry* cdn) { cdn_ = cdn; }
  const std::vector<std::string>& ranges() const { return ranges_; }  // the Range headers blobs were asked with

  // NS/MODEL:TAG with these layers (Ollama's media types, short: "model", "params", ...).
  void add_model(const std::string& ref, const std::vector<OllamaLayer>& layers) {
    std::lock_guard lock(mu_);
    nlohmann::json list = nlohmann::json::array();
    for (const OllamaLayer& l : layers) {
      const std::string hex = sha256_hex(l.bytes);
      blobs_[hex] = l.bytes;
      list.push_back({{"mediaType", "application/vnd.ollama.image." + l.media_type}, {"digest", "sha256:" + hex}, {"size", l.bytes.size()}});
    }
    const std::string config = R"({"model_format":"gguf"})";
    blobs_[sha256_hex(config)] = config;
    manifests_[ref] = nlohmann::json{{"schemaVersion", 2},
                                     {"mediaType", "application/vnd.docker.distribution.manifest.v2+json"},
                                     {"config", {{"mediaType", "application/vnd.docker.container.image.v1+json"},
                                                 {"digest", "sha256:" + sha256_hex(config)},
                                                 {"size", config.size()}}},
                                     {"layers", list}}
                          .dump();
  }
  // A manifest as given (one that claims what its blobs are not).
  void add_manifest(const std::string& ref, const std::string& text) {
    std::lock_guard lock(mu_);
    manifests_[ref] = text;
  }
  // Blobs `cdn` serves for this registry (a redirect's target).
  void share_blobs_with(FakeRegistry& cdn) const {
    std::lock_guard lock(mu_);
    std::lock_guard other(cdn.mu_);
    for (const auto& [hex, bytes] : blobs_) cdn.blobs_[hex] = bytes;
  }

 private:
  void serve_blob(const httplib::Request& req, httplib::Response& res, const std::string& hex, bool may_redirect) {
    std::string bytes;
    {
      std::lock_guard lock(mu_);
      const auto it = blobs_.find(hex);
      if (it == blobs_.end()) {
        res.status = 404;
        return;
      }
      bytes = it->second;
      if (req.has_header("Range")) ranges_.push_back(req.get_header_value("Range"));
    }
    if (may_redirect && mode_ == Mode::redirect && cdn_) {
      res.set_redirect("http://" + cdn_->host() + "/cdn/" + hex, 307);
      return;
    }
    if (mode_ == Mode::corrupt) {
      for (char& c : bytes) c = static_cast<char>(c ^ 0x5a);
    }
    if (mode_ == Mode::slow) {
      // 16 KiB every 20 ms (800 KiB/s): a transfer long enough to interrupt.
      res.set_content_provider(bytes.size(), "application/octet-stream",
                               [bytes](size_t offset, size_t, httplib::DataSink& sink) {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                 sink.write(bytes.data() + offset, std::min<size_t>(16 << 10, bytes.size() - offset));
                                 return true;
                               });
      return;
    }
    if (mode_ == Mode::trickle) {
      // 1 KiB every 100 ms, never silent for long: only a bound on the rate
      // ends it. Stops with the server.
      res.set_content_provider(bytes.size(), "application/octet-stream",
                               [this, bytes](size_t offset, size_t, httplib::DataSink& sink) {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(100));
                                 if (!server_->is_running()) return false;
                                 sink.write(bytes.data() + offset, std::min<size_t>(1 << 10, bytes.size() - offset));
                                 return true;
                               });
      return;
    }
    if (mode_ == Mode::drop_halfway) {
      // Half the bytes, then the connection ends (a provider that fails).
      const size_t total = bytes.size();
      res.set_content_provider(total, "application/octet-stream",
                               [bytes](size_t offset, size_t, httplib::DataSink& sink) {
                                 const size_t half = bytes.size() / 2;
                                 if (offset >= half) return false;
                                 sink.write(bytes.data() + offset, half - offset);
                                 return true;
                               });
      return;
    }
    res.set_content(bytes, "application/octet-stream");  // httplib answers a Range with 206
  }

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<Mode> mode_{Mode::normal};
  const FakeRegistry* cdn_ = nullptr;
  mutable std::mutex mu_;
  std::map<std::string, std::string> manifests_, blobs_;
  std::vector<std::string> ranges_;
};

}  // namespace reclaim::testing
