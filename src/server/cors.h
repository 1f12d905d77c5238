// Which web pages may call the server from a browser (CORS), as
// llama-server's --cors-origins does it, and one step further: a request
// that a browser made for a page of another origin, which the policy does
// not allow, is refused (403) rather than run with its reply hidden, so a
// page on the web cannot drive a server on the user's machine.
//
// Origins are exact ("https://app.example.com"), "localhost" (any port of
// localhost, 127.0.0.1 or [::1]; the default) or "*". The server's own
// origin (the request's Host) is always allowed. The API key is still
// required: a preflight (OPTIONS), which browsers send without it, is
// answered, and nothing else is.
#pragma once

#include <string>
#include <vector>

namespace reclaim::server {

// "localhost", "127.0.0.1", "::1" from "http://[::1]:3000"; empty when the
// text is not an origin.
std::string origin_host(const std::string& origin);

class CorsPolicy {
 public:
  explicit CorsPolicy(std::vector<std::string> origins = {"localhost"});
  // Whether a page of `origin` may call a server that the request reached
  // as `host` (its Host header). A request without Origin is not a page's.
  bool allows(const std::string& origin, const std::string& host) const;

 private:
  std::vector<std::string> origins_;
};

// Throws Error naming a value that is neither "*", "localhost" nor an origin.
void check_cors_origin(const std::string& origin);

}  // namespace reclaim::server
