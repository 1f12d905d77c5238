// The JSON of what the server holds: the models (GET /v1/models) and the
// ledger with the process figures (GET /v1/resources).
#pragma once

#include <nlohmann/json.hpp>

#include "core/usage.h"
#include "runtime/registry.h"

namespace reclaim::server {

nlohmann::json models_json(const Registry& registry);
nlohmann::json model_json(const ModelStatus& s);
// `baseline`: the process just before the first model could load.
nlohmann::json resources_json(const Registry& registry, const Usage& baseline);
nlohmann::json usage_figures_json(const Usage& u);

}  // namespace reclaim::server
