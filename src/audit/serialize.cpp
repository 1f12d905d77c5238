// JSON forms of the audit's records: the child sides send their results to
// the parent this way, and `reclaim audit --json` writes them.
#include "audit/cycles.h"

namespace reclaim::audit {

nlohmann::json to_json(const Usage& u) {
  nlohmann::json j;
  j["t"] = u.t;
  for (const Figure& f : usage_figures()) j[f.name] = u.*f.field;
  nlohmann::json devs = nlohmann::json::array();
  for (const DeviceMemory& d : u.devices) devs.push_back({{"name", d.name}, {"used", d.used}, {"total", d.total}});
  j["devices"] = devs;
  return j;
}

Usage usage_from_json(const nlohmann::json& j) {
  Usage u;
  u.t = j.value("t", 0.0);
  for (const Figure& f : usage_figures()) u.*f.field = j.value(f.name, int64_t{0});
  if (j.contains("devices")) {
    for (const auto& d : j["devices"]) u.devices.push_back({d.value("name", ""), d.value("used", int64_t{0}), d.value("total", int64_t{0})});
  }
  return u;
}

nlohmann::json to_json(const CycleOptions& o) {
  return {{"model", o.model},         {"scenario", scenario_name(o.scenario)},
          {"cycles", o.cycles},       {"load_mode", o.load_mode},
          {"n_ctx", o.n_ctx},         {"n_generate", o.n_generate},
          {"n_threads", o.n_threads}, {"abort_at", o.abort_at},
          {"requests", o.requests},   {"seed", o.seed},
          {"parallel", o.parallel},
          {"gpu_layers", o.gpu_layers},
          {"draft", o.draft},
          {"mmproj", o.mmproj},
          {"test_leak", o.test_leak}};
}

CycleOptions cycle_options_from_json(const nlohmann::json& j) {
  CycleOptions o;
  o.model = j.at("model").get<std::string>();
  o.scenario = scenario_from_name(j.at("scenario").get<std::string>());
  o.cycles = j.value("cycles", o.cycles);
  o.load_mode = j.value("load_mode", o.load_mode);
  o.n_ctx = j.value("n_ctx", o.n_ctx);
  o.n_generate = j.value("n_generate", o.n_generate);
  o.n_threads = j.value("n_threads", o.n_threads);
  o.abort_at = j.value("abort_at", o.abort_at);
  o.requests = j.value("requests", o.requests);
  o.seed = j.value("seed", o.seed);
  o.parallel = j.value("parallel", o.parallel);
  o.gpu_layers = j.value("gpu_layers", o.gpu_layers);
  o.draft = j.value("draft", o.draft);
  o.mmproj = j.value("mmproj", o.mmproj);
  o.test_leak = j.value("test_leak", o.test_leak);
  return o;
}

nlohmann::json to_json(const SideResult& r) {
  nlohmann::json cycles = nlohmann::json::array();
  for (const CycleRecord& c : r.cycles) {
    nlohmann::json requests = nlohmann::json::array();
    for (const Usage& u : c.requests) requests.push_back(to_json(u));
    cycles.push_back({{"peak", to_json(c.peak)},
                      {"after", to_json(c.after)},
                      {"loaded", to_json(c.loaded)},
                      {"requests", requests},
                      {"cancelled_in_prompt", c.cancelled_in_prompt},
                      {"cancelled_in_generation", c.cancelled_in_generation},
                      {"not_cancelled", c.not_cancelled},
                      {"seconds", c.seconds},
                      {"minor_faults", c.minor_faults},
                      {"ledger_live", c.ledger_live},
                      {"ledger_bytes", c.ledger_bytes}});
  }
  nlohmann::json samples = nlohmann::json::array();
  for (const Sample& s : r.samples) {
    samples.push_back({{"t", s.t}, {"cycle", s.cycle}, {"phase", s.phase}, {"rss", s.rss}, {"anon", s.anon}});
  }
  return {{"side", r.side},
          {"start_before", to_json(r.start_before)},
          {"baseline", to_json(r.baseline)},
          {"warmed", r.warmed},
          {"cycles", cycles},
          {"samples", samples},
          {"failed_releases", r.failed_releases},
          {"requests_from_first", r.requests_from_first},
          {"devices", r.devices},
          {"device_warm_before", to_json(r.device_warm_before)},
          {"errors", r.errors}};
}

SideResult side_result_from_json(const nlohmann::json& j) {
  SideResult r;
  r.side = j.at("side").get<std::string>();
  r.start_before = usage_from_json(j.at("start_before"));
  r.baseline = usage_from_json(j.at("baseline"));
  r.warmed = j.value("warmed", "");
  r.devices = j.value("devices", "");
  if (j.contains("device_warm_before")) r.device_warm_before = usage_from_json(j.at("device_warm_before"));
  for (const auto& c : j.at("cycles")) {
    CycleRecord rec;
    rec.peak = usage_from_json(c.at("peak"));
    rec.after = usage_from_json(c.at("after"));
    if (c.contains("loaded")) rec.loaded = usage_from_json(c.at("loaded"));
    if (c.contains("requests")) {
      for (const auto& u : c.at("requests")) rec.requests.push_back(usage_from_json(u));
    }
    rec.cancelled_in_prompt = c.value("cancelled_in_prompt", 0);
    rec.cancelled_in_generation = c.value("cancelled_in_generation", 0);
    rec.not_cancelled = c.value("not_cancelled", 0);
    rec.seconds = c.value("seconds", 0.0);
    rec.minor_faults = c.value("minor_faults", int64_t{0});
    rec.ledger_live = c.value("ledger_live", uint64_t{0});
    rec.ledger_bytes = c.value("ledger_bytes", uint64_t{0});
    r.cycles.push_back(rec);
  }
  for (const auto& s : j.at("samples")) {
    r.samples.push_back({s.value("t", 0.0), s.value("cycle", 0), s.value("phase", ""), s.value("rss", int64_t{0}),
                         s.value("anon", int64_t{0})});
  }
  r.failed_releases = j.value("failed_releases", uint64_t{0});
  r.requests_from_first = j.value("requests_from_first", false);
  r.errors = j.value("errors", std::vector<std::string>{});
  return r;
}

}  // namespace reclaim::audit
