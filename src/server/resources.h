// The JSON of what the server holds: the models (GET /v1/models) and the
// ledger with the process figures (GET /v1/resources).
#pragma once

#include <nlohmann/json.hpp>

#include "core/ledger.h"
#include "core/thresholds.h"
#include "core/usage.h"
#include "runtime/registry.h"
#include "server/model_fields.h"

namespace reclaim::server {

nlohmann::json models_json(const Registry& registry);
// What the server held when it started listening, before any model could load.
struct Baseline {
  Usage usage;
  uint64_t ledger_count = 0, ledger_bytes = 0;  // the ledger's totals then
};
// `connection_fds`: what the clients' open connections hold (Connections::fds()).
nlohmann::json resources_json(const Registry& registry, const Baseline& baseline, int64_t connection_fds);
// Whether what the process holds beyond its start is given back: "holding"
// while models or caches are on the ledger beyond the baseline (their memory
// is accounted, not residue), else "clean" when every residue is within the
// audit's thresholds (core/thresholds.h), or "over" with the figures beyond.
// `models`: models_json's "data"; `total`: the ledger's totals now.
nlohmann::json residue_verdict(const nlohmann::json& models, const LedgerTotals& total, const Baseline& baseline,
                               const Usage& residue);
nlohmann::json usage_figures_json(const Usage& u);

// The accelerators' runtime state (engine/device_life.h): "none" where there
// is no accelerator, else in_use, idle or released, with its releases and
// bring-ups and when an idle one will be released.
nlohmann::json devices_json(Millis device_idle);

}  // namespace reclaim::server
