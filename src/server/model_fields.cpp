#include "server/model_fields.h"

#include <chrono>

namespace reclaim::server {

using nlohmann::json;
using S = const ModelStatus&;
using U = FieldUnit;

namespace {

int64_t unix_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

json places(const Places& p) {
  json j = json::object();
  for (const auto& [place, bytes] : p) j[place] = bytes;
  return j;
}

bool batched(S s) { return s.sequences > 0; }

}  // namespace

const std::vector<ModelField>& model_fields() {
  // In the order of `reclaim ps`'s columns, the last as wide as it is.
  static const std::vector<ModelField> fields = {
      {.key = "id", .value = [](S s) -> json { return s.name; }, .unit = U::text, .help = "The model's name.",
       .column = "MODEL", .width = 24},
      {.key = "aliases", .value = [](S s) -> json { return s.aliases; }, .help = "Other names requests may use."},
      {.key = "reload_pending", .value = [](S s) -> json { return s.reload_pending; }, .unit = U::flag,
       .help = "New settings wait for it to be idle; it is then unloaded and loads with them."},
      {.key = "removing", .value = [](S s) -> json { return s.removing; }, .unit = U::flag,
       .help = "Gone from the configuration: unloaded once idle, then dropped."},
      {.key = "object", .value = [](S) -> json { return "model"; }},
      {.key = "owned_by", .value = [](S) -> json { return "reclaim"; }},
      {.key = "created", .value = [](S) -> json { return 0; }},
      // llama-server's words: "multimodal" for a model with a projector.
      {.key = "capabilities",
       .value = [](S s) -> json {
         return s.mmproj.empty() ? json::array({"completion"}) : json::array({"completion", "multimodal"});
       },
       .help = "What requests it takes: completion, and multimodal (images) when it has a projector."},
      {.key = "mmproj", .value = [](S s) -> json { return s.mmproj.empty() ? json(nullptr) : json(s.mmproj); },
       .help = "Its image projector's file (--mmproj, or 'mmproj' in --config), or null."},
      {.key = "state", .value = [](S s) -> json { return model_state_name(s.state); }, .unit = U::text,
       .help = "unloaded, loading, loaded or unloading.", .column = "STATE", .width = 10},
      {.key = "status",
       .value = [](S s) -> json {
         json j = {{"value", model_state_name(s.state)}};
         if (s.state == ModelState::unloaded && !s.last_error.empty()) j["failed"] = true;
         return j;
       },
       .help = "The state as llama-server's router words it: {\"value\"}, with \"failed\" after a load that failed."},
      {.key = "life", .value = [](S s) -> json { return life_name(s.life); }, .unit = U::text,
       .help = "The state as the registry's state machine has it (runtime/model_life.h)."},
      {.key = "loaded", .value = [](S s) -> json { return s.state == ModelState::loaded; }, .unit = U::flag,
       .help = "1 when the model is loaded.", .metric = "reclaim_model_loaded"},
      {.key = "in_flight", .value = [](S s) -> json { return s.in_flight; }, .unit = U::count,
       .help = "Requests holding the model.", .metric = "reclaim_model_in_flight", .column = "REQUESTS", .width = 9,
       .in_ollama_ps = true},
      {.key = "queued", .value = [](S s) -> json { return s.queued; }, .unit = U::count,
       .help = "Requests waiting for the model: a running slot, its load, or a swap.", .metric = "reclaim_model_waiting",
       .column = "WAITING", .width = 8},
      {.key = "draining", .value = [](S s) -> json { return s.draining; }, .unit = U::flag,
       .help = "1 while the model is chosen to make room and admits no new request.", .metric = "reclaim_model_draining"},
      {.key = "line_position", .value = [](S s) -> json { return s.line_position; }, .unit = U::count,
       .help = "The model's place in the line for room, from 1; 0: not in it.", .metric = "reclaim_model_line_position"},
      {.key = "bytes", .value = [](S s) -> json { return s.loaded_bytes; }, .unit = U::bytes,
       .help = "Bytes on the ledger under the model (weights, contexts, requests).", .metric = "reclaim_model_bytes",
       .column = "BYTES", .width = 12},
      {.key = "estimate", .value = [](S s) -> json { return s.estimate; }, .unit = U::bytes,
       .help = "What the budget counts for the model: the engine's estimate of its last load.",
       .metric = "reclaim_model_estimate_bytes", .column = "ESTIMATE", .width = 12},
      {.key = "estimate_by_device", .value = [](S s) -> json { return places(s.estimate_by_device); }, .unit = U::places,
       .help = "The same estimate, by where it will be.", .metric = "reclaim_model_estimate_device_bytes",
       .per = "device"},
      {.key = "loads", .value = [](S s) -> json { return s.loads; }, .unit = U::count, .help = "Loads of the model.",
       .metric = "reclaim_model_loads_total", .counter = true, .column = "LOADS", .width = 8},
      {.key = "pinned", .value = [](S s) -> json { return s.pinned; }, .unit = U::flag,
       .help = "1 when the model is pinned: never evicted nor unloaded by keep-alive.", .metric = "reclaim_model_pinned",
       .column = "PINNED", .width = 8},
      {.key = "unloads", .value = [](S s) -> json { return s.unloads; }, .unit = U::count,
       .help = "Unloads of the model.", .metric = "reclaim_model_unloads_total", .counter = true},
      {.key = "last_load_ms", .value = [](S s) -> json { return s.last_load_ms; }, .unit = U::millis,
       .help = "Duration of the model's last load.", .metric = "reclaim_model_last_load_seconds", .scale = 0.001},
      {.key = "last_unload_ms", .value = [](S s) -> json { return s.last_unload_ms; }, .unit = U::millis,
       .help = "Duration of the model's last unload.", .metric = "reclaim_model_last_unload_seconds", .scale = 0.001},
      {.key = "last_room", .value = [](S s) -> json { return s.last_room; }, .unit = U::text,
       .help = "How its last load that waited in the line found room: beside the others at once, behind loads and "
               "unloads under way, after an idle model was unloaded (evicted), or after busy ones drained.",
       .shown = [](S s) { return !s.last_room.empty(); }},
      {.key = "last_room_wait_ms", .value = [](S s) -> json { return s.last_room_wait_s * 1000; }, .unit = U::millis,
       .help = "How long the first request of that load waited in the line for room, the load not included.",
       .shown = [](S s) { return !s.last_room.empty(); }},
      {.key = "last_use", .value = [](S s) -> json { return s.loads ? json(unix_seconds(s.last_use)) : json(nullptr); },
       .unit = U::since,
       .help = "When a request last let go of it (unix seconds); null before its first load."},
      {.key = "expires_at", .value = [](S s) -> json { return s.expires_at ? json(unix_seconds(*s.expires_at)) : json(); },
       .unit = U::deadline, .help = "When keep-alive unloads it (unix seconds).",
       .shown = [](S s) { return s.expires_at.has_value(); }, .column = "UNLOADS IN", .width = 10},
      {.key = "bytes_by_device", .value = [](S s) -> json { return places(s.bytes_by_device); }, .unit = U::places,
       .help = "Bytes on the ledger under the model, by where they are.", .metric = "reclaim_model_device_bytes",
       .per = "device", .column = "WHERE", .in_ollama_ps = true},
      {.key = "load_progress", .value = [](S s) -> json { return s.load_progress; }, .unit = U::fraction,
       .help = "0 to 1 while it loads.",
       .shown = [](S s) { return s.state == ModelState::loading; }},
      {.key = "last_error", .value = [](S s) -> json { return s.last_error; }, .unit = U::text,
       .help = "Why its last load failed.", .shown = [](S s) { return !s.last_error.empty(); }},
      {.key = "sequences", .value = [](S s) -> json { return s.sequences; }, .unit = U::count,
       .help = "The batch's sequences (--parallel).", .group = "batch", .shown = batched},
      {.key = "active", .value = [](S s) -> json { return s.sequences_active; }, .unit = U::count,
       .help = "The model's batch sequences in use (--parallel).", .group = "batch", .shown = batched,
       .metric = "reclaim_model_sequences_active"},
      {.key = "decode_steps", .value = [](S s) -> json { return s.decode_steps; }, .unit = U::count,
       .help = "Decodes of the model's batch since its load.", .group = "batch", .shown = batched,
       .metric = "reclaim_model_decode_steps_total", .counter = true},
      {.key = "decoded_tokens", .value = [](S s) -> json { return s.decoded_tokens; }, .unit = U::count,
       .help = "Tokens in those decodes (prompts and generated).", .group = "batch", .shown = batched,
       .metric = "reclaim_model_decoded_tokens_total", .counter = true},
      {.key = "cached_tokens", .value = [](S s) -> json { return s.cached_tokens; }, .unit = U::count,
       .help = "Tokens whose KV cells the model's prompt cache keeps.", .group = "batch", .shown = batched,
       .metric = "reclaim_model_cached_tokens"},
      {.key = "saved", .value = [](S s) -> json { return s.saved; }, .unit = U::count,
       .help = "Sequences the model's prompt cache saved to host memory.", .group = "batch", .shown = batched},
      {.key = "saved_bytes", .value = [](S s) -> json { return s.saved_bytes; }, .unit = U::bytes,
       .help = "Host memory of the sequences the model's prompt cache saved (--cache-ram).", .group = "batch",
       .shown = batched, .metric = "reclaim_model_prompt_cache_saved_bytes"},
  };
  return fields;
}

const char* unit_name(FieldUnit u) {
  switch (u) {
    case FieldUnit::text: return "text";
    case FieldUnit::count: return "count";
    case FieldUnit::bytes: return "bytes";
    case FieldUnit::flag: return "flag";
    case FieldUnit::deadline: return "unix_seconds";
    case FieldUnit::since: return "unix_seconds_past";
    case FieldUnit::millis: return "milliseconds";
    case FieldUnit::fraction: return "fraction";
    case FieldUnit::places: return "bytes_by_place";
    case FieldUnit::other: break;
  }
  return "other";
}

json model_fields_json() {
  json out = json::array();
  for (const ModelField& f : model_fields()) {
    auto or_null = [](const char* v) { return v ? json(v) : json(nullptr); };
    out.push_back({{"key", f.key},
                   {"group", or_null(f.group)},
                   {"always", f.shown == nullptr},
                   {"unit", unit_name(f.unit)},
                   {"help", f.help},
                   {"metric", or_null(f.metric)},
                   {"metric_type", f.metric ? json(f.counter ? "counter" : "gauge") : json(nullptr)},
                   {"column", or_null(f.column)}});
  }
  return out;
}

json model_json(const ModelStatus& s) {
  json j = json::object();
  for (const ModelField& f : model_fields()) {
    if (f.shown && !f.shown(s)) continue;
    (f.group ? j[f.group][f.key] : j[f.key]) = f.value(s);
  }
  return j;
}

}  // namespace reclaim::server
