// `reclaim ps`: what a running server holds, from its /v1/resources, as
// tables: the models, the ledger by owner, and the process residue. With
// --watch, the tables are drawn again in place every interval.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/size.h"
#include "server/model_fields.h"

namespace reclaim::cli {

namespace {

struct Args {
  std::string url = "http://127.0.0.1:8080", api_key;
  bool json = false;
  bool watch = false;
  bool insecure = false;
  double every = 1;  // seconds between frames of --watch
};

std::string bytes(const nlohmann::json& v) { return format_bytes(v.is_number() ? v.get<int64_t>() : 0); }

// printf onto a string.
void add(std::string& out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) out.append(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
}

// "4m32s" until a unix time; "" when there is none.
std::string time_left(const nlohmann::json& m) {
  if (!m.contains("expires_at") || !m["expires_at"].is_number()) return "";
  const int64_t left = m["expires_at"].get<int64_t>() - static_cast<int64_t>(std::time(nullptr));
  if (left <= 0) return "now";
  char buf[32];
  if (left >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(left / 3600), static_cast<long long>(left % 3600 / 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(left / 60), static_cast<long long>(left % 60));
  }
  return buf;
}

nlohmann::json fetch(const Args& a) {
  httplib::Client client(a.url);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(30, 0);
  // An https URL's certificate is checked against the system's authorities
  // unless told not to (a self-signed one).
  client.enable_server_certificate_verification(!a.insecure);
  httplib::Headers headers;
  if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
  auto r = client.Get("/v1/resources", headers);
  if (!r) {
    const bool unverified = r.error() == httplib::Error::SSLServerVerification;
    throw Error("cannot reach a reclaim server at " + a.url + ": " + httplib::to_string(r.error()) +
                (unverified ? " (its certificate is signed by no authority this machine knows; --insecure accepts it)" : ""));
  }
  if (r->status != 200) throw Error(a.url + "/v1/resources answered " + std::to_string(r->status) + ": " + r->body.substr(0, 300));
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("ledger")) throw Error(a.url + " did not answer like a reclaim server");
  return j;
}

// A field of a model's JSON as `reclaim ps` shows it.
std::string cell(const server::ModelField& f, const nlohmann::json& m) {
  const nlohmann::json& v = m.contains(f.key) ? m[f.key] : nlohmann::json();
  switch (f.unit) {
    case server::FieldUnit::bytes: return bytes(v);
    case server::FieldUnit::flag: return v.is_boolean() && v.get<bool>() ? "yes" : "";
    case server::FieldUnit::deadline: return time_left(m);
    case server::FieldUnit::places: {
      // Host and each accelerator apart: they are not one pool.
      std::string where;
      if (!v.is_object()) return where;
      for (const auto& [place, b] : v.items()) {
        if (b.is_number() && b.get<int64_t>() > 0) where += (where.empty() ? "" : ", ") + place + " " + bytes(b);
      }
      return where;
    }
    default: return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump();
  }
}

std::string models_table(const nlohmann::json& models) {
  std::string out;
  // Text to the left, numbers to the right; the last column as long as it is.
  auto row = [&](auto&& text_of) {
    std::string line;
    for (const server::ModelField& f : server::model_fields()) {
      if (!f.column) continue;
      if (!line.empty()) line += ' ';
      const std::string t = text_of(f);
      const bool left = f.unit == server::FieldUnit::text;
      add(line, left ? "%-*s" : "%*s", f.width, t.c_str());
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  row([](const server::ModelField& f) { return std::string(f.column); });
  for (const auto& m : models) row([&](const server::ModelField& f) { return cell(f, m); });
  return out;
}

std::string tables(const nlohmann::json& j) {
  std::string out = models_table(j["models"]);
  add(out, "\n%-48s %8s %12s\n", "OWNER", "ENTRIES", "BYTES");
  for (const auto& [owner, t] : j["ledger"]["by_owner"].items()) {
    add(out, "%-48s %8llu %12s\n", owner.c_str(), static_cast<unsigned long long>(t.value("count", uint64_t{0})),
        bytes(t["bytes"]).c_str());
  }
  add(out, "%-48s %8llu %12s\n", "total", static_cast<unsigned long long>(j["ledger"].value("count", uint64_t{0})),
      bytes(j["ledger"]["bytes"]).c_str());
  if (j["ledger"].contains("by_device")) {
    for (const auto& [place, t] : j["ledger"]["by_device"].items()) {
      add(out, "%-48s %8llu %12s\n", ("  on " + place).c_str(), static_cast<unsigned long long>(t.value("count", uint64_t{0})),
          bytes(t["bytes"]).c_str());
    }
  }
  const auto& res = j["residue"];
  add(out, "\nresidue since the server started listening: anon %s, rss %s, threads %lld, fds %lld, maps %lld, locked %s, device %s\n",
      bytes(res["anon"]).c_str(), bytes(res["rss"]).c_str(), static_cast<long long>(res.value("threads", int64_t{0})),
      static_cast<long long>(res.value("fds", int64_t{0})), static_cast<long long>(res.value("maps", int64_t{0})),
      bytes(res["locked"]).c_str(), bytes(res["device_used"]).c_str());
  add(out, "memory budget %s, accounted %s\n", bytes(j["memory_budget"]).c_str(), bytes(j["accounted"]).c_str());
  const auto& d = j.value("devices", nlohmann::json::object());
  if (d.value("state", "none") != "none") {
    std::string when;
    if (d["state"] == "idle" && d["release_after_s"].is_number()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ", released after %.0f s idle (idle %.0f s)", d["release_after_s"].get<double>(),
                    d.value("idle_s", 0.0));
      when = buf;
    }
    add(out, "device %s: %s%s; runtime state %s; released %llu times, brought up again %llu\n",
        d.value("names", "").c_str(), d.value("state", "").c_str(), when.c_str(), bytes(d["state_bytes"]).c_str(),
        static_cast<unsigned long long>(d.value("releases", uint64_t{0})),
        static_cast<unsigned long long>(d.value("bring_ups", uint64_t{0})));
  }
  return out;
}

// Frames drawn over each other: the cursor home, each line cleared to its
// end, and what the last frame left below cleared, so nothing scrolls.
int watch(const Args& a) {
  const auto interval = std::chrono::duration<double>(a.every);
  for (;;) {
    const auto next = std::chrono::steady_clock::now() + interval;
    std::string body;
    try {
      body = tables(fetch(a));
    } catch (const Error& e) {
      // A server restarting is watched until it is back.
      body = std::string(e.what()) + "\n";
    }
    const std::time_t now = std::time(nullptr);
    char clock[16];
    std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
    std::string frame = "\x1b[H";
    add(frame, "reclaim ps %s, every %.3g s, at %s (Ctrl-C to stop)\x1b[K\n\x1b[K\n", a.url.c_str(), a.every, clock);
    for (size_t at = 0; at < body.size();) {
      const size_t nl = body.find('\n', at);
      frame += body.substr(at, nl - at) + "\x1b[K\n";
      at = nl == std::string::npos ? body.size() : nl + 1;
    }
    frame += "\x1b[J";
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    // A closed stdout (the reader left) ends the watch.
    if (std::fflush(stdout) != 0) return 0;
    std::this_thread::sleep_until(next);
  }
}

int ps(const Args& a) {
  if (a.watch) return watch(a);
  const nlohmann::json j = fetch(a);
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const std::string t = tables(j);
  std::fwrite(t.data(), 1, t.size(), stdout);
  return 0;
}

}  // namespace

Command add_ps(CLI::App& app) {
  auto* sub = app.add_subcommand("ps", "what a running reclaim server holds: models, the ledger, the residue");
  auto a = std::make_shared<Args>();
  sub->add_option("--url", a->url, "the server")->capture_default_str();
  sub->add_option("--api-key", a->api_key, "its API key, if it has one");
  sub->add_flag("--insecure", a->insecure, "with an https URL, accept a certificate no known authority signed");
  sub->add_flag("--json", a->json, "print /v1/resources as it came");
  auto* w = sub->add_flag("--watch", a->watch, "draw the tables again in place, until Ctrl-C")->excludes("--json");
  sub->add_option("--every", a->every, "seconds between frames of --watch")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0))
      ->needs(w);
  return [a] { return ps(*a); };
}

}  // namespace reclaim::cli
