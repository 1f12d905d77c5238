// `reclaim ps`: what a running server holds, from its /v1/resources, as
// tables: the models, the ledger by owner, and the process residue.
#include <httplib.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/size.h"

namespace reclaim::cli {

namespace {

struct Args {
  std::string url = "http://127.0.0.1:8080", api_key;
  bool json = false;
};

std::string bytes(const nlohmann::json& v) { return format_bytes(v.is_number() ? v.get<int64_t>() : 0); }

int ps(const Args& a) {
  httplib::Client client(a.url);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(30, 0);
  httplib::Headers headers;
  if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
  auto r = client.Get("/v1/resources", headers);
  if (!r) throw Error("cannot reach a reclaim server at " + a.url + ": " + httplib::to_string(r.error()));
  if (r->status != 200) throw Error(a.url + "/v1/resources answered " + std::to_string(r->status) + ": " + r->body.substr(0, 300));
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("ledger")) throw Error(a.url + " did not answer like a reclaim server");
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-24s %-10s %9s %12s %12s %8s %8s  %s\n", "MODEL", "STATE", "REQUESTS", "BYTES", "ESTIMATE", "LOADS",
              "PINNED", "WHERE");
  for (const auto& m : j["models"]) {
    // Host and each accelerator apart: they are not one pool.
    std::string where;
    if (m.contains("bytes_by_device")) {
      for (const auto& [place, b] : m["bytes_by_device"].items()) {
        if (b.get<int64_t>() > 0) where += (where.empty() ? "" : ", ") + place + " " + bytes(b);
      }
    }
    std::printf("%-24s %-10s %9d %12s %12s %8llu %8s  %s\n", m.value("id", "").c_str(), m.value("state", "").c_str(),
                m.value("in_flight", 0), bytes(m["bytes"]).c_str(), bytes(m["estimate"]).c_str(),
                static_cast<unsigned long long>(m.value("loads", uint64_t{0})), m.value("pinned", false) ? "yes" : "",
                where.c_str());
  }
  std::printf("\n%-48s %8s %12s\n", "OWNER", "ENTRIES", "BYTES");
  for (const auto& [owner, t] : j["ledger"]["by_owner"].items()) {
    std::printf("%-48s %8llu %12s\n", owner.c_str(), static_cast<unsigned long long>(t.value("count", uint64_t{0})),
                bytes(t["bytes"]).c_str());
  }
  std::printf("%-48s %8llu %12s\n", "total", static_cast<unsigned long long>(j["ledger"].value("count", uint64_t{0})),
              bytes(j["ledger"]["bytes"]).c_str());
  if (j["ledger"].contains("by_device")) {
    for (const auto& [place, t] : j["ledger"]["by_device"].items()) {
      std::printf("%-48s %8llu %12s\n", ("  on " + place).c_str(), static_cast<unsigned long long>(t.value("count", uint64_t{0})),
                  bytes(t["bytes"]).c_str());
    }
  }
  const auto& res = j["residue"];
  std::printf("\nresidue since the server started listening: anon %s, rss %s, threads %lld, fds %lld, maps %lld, locked %s, device %s\n",
              bytes(res["anon"]).c_str(), bytes(res["rss"]).c_str(), static_cast<long long>(res.value("threads", int64_t{0})),
              static_cast<long long>(res.value("fds", int64_t{0})), static_cast<long long>(res.value("maps", int64_t{0})),
              bytes(res["locked"]).c_str(), bytes(res["device_used"]).c_str());
  std::printf("memory budget %s, accounted %s\n", bytes(j["memory_budget"]).c_str(), bytes(j["accounted"]).c_str());
  return 0;
}

}  // namespace

Command add_ps(CLI::App& app) {
  auto* sub = app.add_subcommand("ps", "what a running reclaim server holds: models, the ledger, the residue");
  auto a = std::make_shared<Args>();
  sub->add_option("--url", a->url, "the server")->capture_default_str();
  sub->add_option("--api-key", a->api_key, "its API key, if it has one");
  sub->add_flag("--json", a->json, "print /v1/resources as it came");
  return [a] { return ps(*a); };
}

}  // namespace reclaim::cli
