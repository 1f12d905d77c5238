#include "server/resources.h"

#include "core/heap.h"
#include "core/ledger.h"
#include "engine/device_life.h"
#include "server/model_fields.h"

namespace reclaim::server {

using nlohmann::json;

json models_json(const Registry& registry) {
  json data = json::array();
  for (const ModelStatus& s : registry.list()) data.push_back(model_json(s));
  return {{"object", "list"}, {"data", data}};
}

json usage_figures_json(const Usage& u) {
  json j;
  for (const Figure& f : usage_figures()) j[f.name] = u.*f.field;
  return j;
}

json residue_verdict(const json& models, const LedgerTotals& total, const Baseline& baseline, const Usage& residue) {
  int loaded = 0;
  for (const json& m : models) loaded += m["state"] != model_state_name(ModelState::unloaded);
  const int64_t held_entries = static_cast<int64_t>(total.count) - static_cast<int64_t>(baseline.ledger_count);
  const int64_t held_bytes = static_cast<int64_t>(total.bytes) - static_cast<int64_t>(baseline.ledger_bytes);
  const Thresholds limits;
  json checks = json::array();
  bool over = false;
  auto check = [&](const char* figure, int64_t value, int64_t limit) {
    checks.push_back({{"figure", figure}, {"value", value}, {"limit", limit}, {"ok", value <= limit}});
    over = over || value > limit;
  };
  check("anon+swap", residue.anon + residue.swap, limits.anon_residue);
  check("locked", residue.locked, limits.locked);
  check("fds", residue.fds, limits.fds);
  check("threads", residue.threads, limits.threads);
  check("maps", residue.maps, limits.maps);
  check("device", residue.device_used, limits.device);
  const bool holding = loaded > 0 || held_entries > 0 || held_bytes > 0;
  return {{"verdict", holding ? "holding" : over ? "over" : "clean"},
          {"models_loaded", loaded},
          {"held_entries", held_entries},
          {"held_bytes", held_bytes},
          {"checks", checks}};
}

namespace {

// null when files are trusted (--trust-models).
json vetting_json(const Vetter* vetter) {
  if (!vetter) return nullptr;
  const VetterCounts c = vetter->counts();
  return {{"running", c.running}, {"queued", c.queued}, {"vetted", c.children}, {"refused", c.refused},
          {"cached", c.cached}, {"kept", c.kept}, {"last_ms", c.last_ms}};
}

}  // namespace

json resources_json(const Registry& registry, const Baseline& base, int64_t connection_fds) {
  const Usage& baseline = base.usage;
  // The process is measured before this answer is built: with many models,
  // its JSON held while the figures were read would be counted as residue
  // (390 KiB of heap with 129 models; GET /v1/resources on a server of a
  // --models-dir of as many files, against reclaim_process_residue in
  // /metrics, which is read first). The ledger read after it can only show
  // more held than the figures, never residue that nothing holds.
  Usage now_usage = Usage::capture();
  // Heap freed while the figures were read (a browser's polls during an
  // unload) is given back before it is judged, as the history's sampler would
  // a second later.
  if (give_back_free_heap(now_usage.heap_free)) now_usage = Usage::capture();
  Usage residue = now_usage - baseline;
  // The clients' connections are open while they are measured: a socket and
  // the watchdog's duplicate each (server/connections.h). A browser keeps
  // several.
  residue.fds -= connection_fds;
  Ledger& ledger = Ledger::process();
  const auto now = std::chrono::steady_clock::now();
  json entries = json::array();
  for (const LedgerEntry& e : ledger.entries()) {
    json entry = {{"id", e.id},
                  {"kind", kind_name(e.kind)},
                  {"owner", e.owner},
                  {"label", e.label},
                  {"bytes", e.bytes},
                  {"age_ms", std::chrono::duration<double, std::milli>(now - e.since).count()}};
    // On an accelerator too: "bytes" is the host's part.
    if (!e.devices.empty()) {
      json devices = json::object();
      for (const DeviceBytes& d : e.devices) devices[d.device] = d.bytes;
      entry["device_bytes"] = devices;
    }
    entries.push_back(std::move(entry));
  }
  json by_device = json::object();
  for (const auto& [place, t] : ledger.by_device()) by_device[place] = {{"count", t.count}, {"bytes", t.bytes}};
  json by_kind = json::object();
  for (const auto& [kind, t] : ledger.by_kind()) by_kind[std::string(kind_name(kind))] = {{"count", t.count}, {"bytes", t.bytes}};
  json by_owner = json::object();
  for (const auto& [owner, t] : ledger.by_owner()) by_owner[owner] = {{"count", t.count}, {"bytes", t.bytes}};
  const LedgerTotals total = ledger.totals();
  const json models = models_json(registry)["data"];
  return {{"ledger",
           {{"count", total.count},
            {"bytes", total.bytes},
            {"failed_releases", ledger.failed_releases()},
            {"by_kind", by_kind},
            {"by_owner", by_owner},
            {"by_device", by_device},
            {"entries", entries}}},
          {"usage", usage_figures_json(now_usage)},
          {"baseline", usage_figures_json(baseline)},
          {"residue", usage_figures_json(residue)},
          {"residue_verdict", residue_verdict(models, total, base, residue)},
          {"models", models},
          {"model_fields", model_fields_json()},
          {"accounted", registry.accounted()},
          {"memory_budget", registry.options().memory_budget},
          {"memory_budget_by_device", registry.options().memory_budget_at},
          {"accounted_by_device", registry.accounted_by_place()},
          {"vetting", vetting_json(registry.options().vetter.get())},
          {"devices", devices_json(registry.options().device_idle)}};
}

json devices_json(Millis device_idle) {
  const DeviceLifeStatus d = device_life();
  json j = {{"state", device_state_name(d.state)}};
  if (d.state == DeviceState::absent) return j;
  j["names"] = d.names;
  j["releasable"] = d.releasable;
  j["release_after_s"] = device_idle.count() < 0 || !d.releasable ? json(nullptr) : json(device_idle.count() / 1000.0);
  j["holds"] = d.holds;
  j["idle_s"] = d.idle_s;
  j["state_bytes"] = d.state_bytes;
  j["releases"] = d.releases;
  j["bring_ups"] = d.bring_ups;
  j["last_release_ms"] = d.last_release_ms;
  j["last_bring_up_ms"] = d.last_bring_up_ms;
  if (!d.limits.empty()) {
    json limits = json::array();
    for (const DeviceContextLimits& l : d.limits) {
      limits.push_back({{"device", l.device}, {"stack_size", l.stack_size}, {"heap_size", l.heap_size},
                        {"lazy_loading", l.lazy_loading}});
    }
    j["context_limits"] = limits;
  }
  return j;
}

}  // namespace reclaim::server
