// GET / and /dashboard/*: the dashboard's page and its files, from the binary
// (server/dashboard_files.h). The page reads the same endpoints any client
// does (/v1/resources, /v1/resources/history, /v1/models/load and unload),
// under the same key.
#include <httplib.h>

#include <string>

#include "server/connections.h"
#include "server/dashboard_files.h"
#include "server/http_errors.h"
#include "server/server.h"

namespace reclaim::server {

namespace {

void send_file(const DashboardFile& f, httplib::Response& res) {
  // Everything the page loads is its own: no script, style or connection
  // leaves this server, and no other site may frame its buttons.
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
  res.set_content(f.bytes.data(), f.bytes.size(), std::string(f.type) + "; charset=utf-8");
}

const DashboardFile* find_file(const std::string& url) {
  for (size_t i = 0; i < kDashboardFileCount; ++i) {
    if (url == kDashboardFiles[i].url) return &kDashboardFiles[i];
  }
  return nullptr;
}

}  // namespace

// A browser gets the dashboard; a program probing that a server is there
// (Ollama's clients, curl) gets one line of text.
void Server::dashboard_index(const httplib::Request& req, httplib::Response& res) {
  if (req.get_header_value("Accept").find("text/html") != std::string::npos) {
    send_file(*find_file("/"), res);
  } else {
    res.set_content("reclaim is running", "text/plain");
  }
}

void Server::dashboard_file(const httplib::Request& req, httplib::Response& res) {
  const DashboardFile* f = find_file(req.path);
  if (f == nullptr) {
    send_error(res, {404, "invalid_request_error", "not_found", "the dashboard has no file " + std::string(req.matches[1]), 0});
    return;
  }
  send_file(*f, res);
}

}  // namespace reclaim::server
