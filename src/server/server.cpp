#include "server/server.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/ledger.h"
#include "server/accepted.h"
#include "server/http_errors.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/resources.h"

namespace reclaim::server {

using nlohmann::json;

bool same_secret(const std::string& a, const std::string& b) {
  // Every byte is compared whatever the earlier ones were, so the time does
  // not tell how much of a guess was right.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

bool key_in_authorization(const std::string& auth, const std::string& key) {
  const std::string bearer = "Bearer ", basic = "Basic ";
  if (auth.rfind(bearer, 0) == 0) return same_secret(auth.substr(bearer.size()), key);
  if (auth.rfind(basic, 0) != 0) return false;
  // A browser's login (the dashboard): any user name, the key as password.
  const std::string encoded = auth.substr(basic.size());
  if (encoded.empty() || encoded.size() % 4 != 0 || encoded.size() > 4096) return false;
  std::string decoded(encoded.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                reinterpret_cast<const unsigned char*>(encoded.data()), static_cast<int>(encoded.size()));
  if (n < 0) return false;
  // EVP_DecodeBlock counts the padding's bytes as zeros.
  size_t size = static_cast<size_t>(n);
  for (size_t i = encoded.size(); i > 0 && encoded[i - 1] == '='; --i) --size;
  decoded.resize(size);
  const size_t colon = decoded.find(':');
  return colon != std::string::npos && same_secret(decoded.substr(colon + 1), key);
}

bool any_key_given(const std::string& authorization, const std::string& x_api_key, const std::vector<std::string>& keys) {
  bool given = false;
  for (const std::string& key : keys) {
    given |= key_in_authorization(authorization, key);
    given |= same_secret(x_api_key, key);
  }
  return given;
}

namespace {

// HTTP, or HTTPS where the options give a certificate and its key: httplib
// reads both into an OpenSSL context here, before the baseline, and makes
// each connection's session from it.
std::unique_ptr<httplib::Server> make_http(const ServerOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) return std::make_unique<httplib::Server>();
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    throw Error("HTTPS needs both --ssl-cert-file and --ssl-key-file");
  }
  for (const auto& [flag, path] : {std::pair{"--ssl-cert-file", o.tls_cert_file}, std::pair{"--ssl-key-file", o.tls_key_file}}) {
    if (::access(path.c_str(), R_OK) != 0) throw Error(std::string(flag) + " '" + path + "' cannot be read: " + std::strerror(errno));
  }
  ERR_clear_error();
  auto https = std::make_unique<httplib::SSLServer>(o.tls_cert_file.c_str(), o.tls_key_file.c_str());
  if (!https->is_valid()) {
    // A file that is not PEM, a key that is not the certificate's.
    char why[256] = "OpenSSL gave no reason";
    if (const unsigned long e = ERR_get_error()) ERR_error_string_n(e, why, sizeof why);
    ERR_clear_error();
    throw Error("cannot serve HTTPS with certificate '" + o.tls_cert_file + "' and key '" + o.tls_key_file + "': " + why);
  }
  return https;
}

}  // namespace

Server::Server(ServerOptions options, Registry& registry)
    : options_(std::move(options)), cors_(options_.cors_origins), unload_timeout_(options_.unload_timeout), registry_(registry),
      http_(make_http(options_)) {
  // The threads that stay start here, not when listening starts, so that
  // they are in the baseline that residues are counted from. httplib deletes
  // the queue it is given when it stops; it gets a forwarder to this pool.
  connections_ = std::make_unique<Connections>(scope_, options_.read_timeout);
  pool_ = std::make_unique<WorkerPool>(scope_, static_cast<size_t>(options_.http_threads),
                                       static_cast<size_t>(std::max(options_.max_connections, options_.http_threads)));
  struct Forward : httplib::TaskQueue {
    explicit Forward(Server& s) : server(s) {}
    // On the thread that accepted the connection, right after accept().
    void enqueue(std::function<void()> fn) override {
      const int socket = take_accepted_socket();
      Connections* conns = server.connections_.get();
      server.pool_->enqueue([conns, socket, fn = std::move(fn)] { conns->serve(socket, fn); });
    }
    void shutdown() override { server.shutdown_pool(); }
    Server& server;
  };
  http_->new_task_queue = [this] { return new Forward(*this); };
  history_ = std::make_unique<ResourceHistory>(scope_, registry_, options_.history_every, options_.history_samples);
  sessions_ = std::make_unique<StreamSessions>(scope_);
  http_->set_payload_max_length(options_.max_body);
  // The end of each answer (a stream's included): the connection's next
  // request must come within the read timeout.
  http_->set_logger([](const httplib::Request&, const httplib::Response&) { Connections::answered(); });
  routes();
}

Server::~Server() {
  http_.reset();
  shutdown_pool();  // when it never listened
  connections_.reset();
}

HttpStats Server::http_stats() const {
  HttpStats h;
  h.threads = pool_->threads();
  h.busy = pool_->busy();
  h.queued = pool_->queued();
  h.peak = pool_->peak();
  h.connections = connections_->open();
  h.cut = connections_->cut();
  h.streams = sessions_->count();
  h.stream_bytes = sessions_->bytes();
  return h;
}

void Server::shutdown_pool() {
  // ThreadPool::shutdown joins its threads, which can be done once.
  if (!pool_shut_.exchange(true)) pool_->shutdown();
}

int Server::bind() {
  int port = options_.port;
  errno = 0;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
  } else if (!http_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  // httplib returns no reason; bind(2)'s errno is the last one it set.
  if (port <= 0) {
    const int e = errno;
    throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                (e != 0 ? std::string(": ") + std::strerror(e) : std::string()));
  }
  return port;
}

void Server::run() { http_->listen_after_bind(); }

bool Server::running() const { return http_->is_running(); }

void Server::set_baseline(Usage baseline) {
  const LedgerTotals ledger = Ledger::process().totals();
  std::lock_guard lock(baseline_mu_);
  baseline_.usage = std::move(baseline);
  baseline_.ledger_count = ledger.count;
  baseline_.ledger_bytes = ledger.bytes;
}

void Server::stop() {
  stopping_ = true;
  http_->stop();
}

}  // namespace reclaim::server
