#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace reclaim::server {

namespace {

// "scheme://authority" with nothing after it (a browser's Origin header).
bool split_origin(const std::string& origin, std::string& scheme, std::string& authority) {
  const size_t sep = origin.find("://");
  if (sep == std::string::npos || sep == 0) return false;
  scheme = origin.substr(0, sep);
  authority = origin.substr(sep + 3);
  if (authority.empty() || authority.find_first_of("/?#@ ") != std::string::npos) return false;
  return std::all_of(scheme.begin(), scheme.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'; });
}

// The host of "host", "host:port", "[v6]" or "[v6]:port".
std::string host_of_authority(const std::string& authority) {
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return "";
    const std::string rest = authority.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return "";
    return authority.substr(1, close - 1);
  }
  return authority.substr(0, authority.find(':'));
}

bool is_localhost(const std::string& host) { return host == "localhost" || host == "127.0.0.1" || host == "::1"; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::string origin_host(const std::string& origin) {
  std::string scheme, authority;
  if (!split_origin(origin, scheme, authority)) return "";
  return lower(host_of_authority(authority));
}

CorsPolicy::CorsPolicy(std::vector<std::string> origins) : origins_(std::move(origins)) {
  for (std::string& o : origins_) o = lower(o);
}

bool CorsPolicy::allows(const std::string& origin, const std::string& host) const {
  if (origin.empty()) return true;
  std::string scheme, authority;
  if (!split_origin(origin, scheme, authority)) return false;
  // The page the server itself served (a dashboard reached by any name).
  if (!host.empty() && lower(authority) == lower(host)) return true;
  const std::string o = lower(origin);
  for (const std::string& allowed : origins_) {
    if (allowed == "*" || allowed == o) return true;
    if (allowed == "localhost" && is_localhost(lower(host_of_authority(authority)))) return true;
  }
  return false;
}

void check_cors_origin(const std::string& origin) {
  if (origin == "*" || origin == "localhost") return;
  std::string scheme, authority;
  if (!split_origin(origin, scheme, authority) || host_of_authority(authority).empty()) {
    throw Error("--cors-origin '" + origin + "' is not an origin (scheme://host[:port], 'localhost' or '*')");
  }
}

}  // namespace reclaim::server
