// Every field of a model's status, named once for every view: the JSON of
// /v1/models and /v1/resources, the Prometheus families of /metrics,
// reclaim's own fields in Ollama's /api/ps, the columns of `reclaim ps`, and
// the dashboard's details of a model (which reads the table from
// /v1/resources). A new figure is one row here (and its value in
// ModelStatus); each view walks the table, as usage_figures() is walked for
// the process figures.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/model_status.h"

namespace reclaim::server {

// How a value reads, for `reclaim ps`.
enum class FieldUnit {
  text,
  count,
  bytes,
  flag,      // "yes" or nothing
  deadline,  // a unix time, shown as the time left until it
  since,     // a unix time past, shown as the time since it
  millis,    // a duration in milliseconds
  fraction,  // 0 to 1, shown as a percentage
  places,    // bytes by place: "host 1.2 GiB, vulkan0 300 MiB"
  other,
};

struct ModelField {
  const char* key;  // in the JSON, under `group` where there is one
  nlohmann::json (*value)(const ModelStatus&);
  FieldUnit unit = FieldUnit::other;
  const char* help = "";
  // Nested in the JSON under this key, with the group's other fields.
  const char* group = nullptr;
  // In the JSON only where this says so (null: always).
  bool (*shown)(const ModelStatus&) = nullptr;
  // Its Prometheus family, labelled by model (null: none). A value that is an
  // object gives a sample for each of its keys, labelled `per`.
  const char* metric = nullptr;
  bool counter = false;
  double scale = 1;  // metric = value * scale: milliseconds to seconds
  const char* per = nullptr;
  const char* column = nullptr;  // `reclaim ps`'s header (null: not a column)
  int width = 0;
  bool in_ollama_ps = false;  // among reclaim's own fields of /api/ps
};

const std::vector<ModelField>& model_fields();

// The table itself, for /v1/resources: each field's key, group, whether it
// is always in the JSON, unit, help, metric and column.
nlohmann::json model_fields_json();

// A model's status as /v1/models has it.
nlohmann::json model_json(const ModelStatus& s);

}  // namespace reclaim::server
