#include "server/metrics.h"

#include <algorithm>
#include <sstream>

#include "core/ledger.h"
#include "engine/device_life.h"
#include "server/model_fields.h"

namespace reclaim::server {

using nlohmann::json;

std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  template <class V>
  void sample(const char* name, const std::string& labels, V value) {
    out_ << name;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << value << '\n';
  }
  // A family of one sample without labels.
  template <class V>
  void single(const char* name, const char* type, const char* help, V value) {
    family(name, type, help);
    sample(name, "", value);
  }
  // A histogram's buckets (cumulative, then +Inf), sum and count.
  void histogram(const char* name, const char* help, const HistogramCounts& h) {
    family(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      std::ostringstream le;
      le << h.bounds[i];
      sample(bucket.c_str(), "le=\"" + le.str() + "\"", h.at_most[i]);
    }
    sample(bucket.c_str(), "le=\"+Inf\"", h.count);
    sample((std::string(name) + "_sum").c_str(), "", h.sum);
    sample((std::string(name) + "_count").c_str(), "", h.count);
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string label(const char* key, const std::string& value) { return std::string(key) + "=\"" + label_value(value) + "\""; }

// A sample of a field's JSON value: integers as they are, booleans as 0 or
// 1, the rest scaled.
void model_sample(Writer& w, const ModelField& f, const std::string& labels, const json& v) {
  if (v.is_boolean()) {
    w.sample(f.metric, labels, v.get<bool>() ? 1 : 0);
  } else if (v.is_number_unsigned() && f.scale == 1) {
    w.sample(f.metric, labels, v.get<uint64_t>());
  } else if (v.is_number_integer() && f.scale == 1) {
    w.sample(f.metric, labels, v.get<int64_t>());
  } else if (v.is_number()) {
    w.sample(f.metric, labels, v.get<double>() * f.scale);
  }
}

void model_family(Writer& w, const ModelField& f, const std::vector<ModelStatus>& models) {
  w.family(f.metric, f.counter ? "counter" : "gauge", f.help);
  for (const ModelStatus& m : models) {
    const json v = f.value(m);
    if (!v.is_object()) {
      model_sample(w, f, label("model", m.name), v);
      continue;
    }
    for (const auto& [key, x] : v.items()) model_sample(w, f, label("model", m.name) + "," + label(f.per, key), x);
  }
}

}  // namespace

namespace {

void process_families(Writer& w, const Usage& baseline) {
  const Usage now = Usage::capture();
  const Usage residue = now - baseline;
  w.family("reclaim_process_figure", "gauge", "Process figures from /proc/self, the heap and the accelerators (bytes or counts).");
  for (const Figure& f : usage_figures()) w.sample("reclaim_process_figure", label("figure", f.name), now.*f.field);
  w.family("reclaim_process_residue", "gauge", "Process figures minus the baseline taken when the server started listening.");
  for (const Figure& f : usage_figures()) w.sample("reclaim_process_residue", label("figure", f.name), residue.*f.field);
}

void ledger_families(Writer& w) {
  Ledger& ledger = Ledger::process();
  const auto by_kind = ledger.by_kind();
  w.family("reclaim_resources", "gauge", "Live resources on the ledger, by kind.");
  for (Kind k : kAllKinds) {
    auto it = by_kind.find(k);
    w.sample("reclaim_resources", label("kind", std::string(kind_name(k))), it == by_kind.end() ? 0 : it->second.count);
  }
  w.family("reclaim_resource_bytes", "gauge", "Bytes of the live resources on the ledger, by kind.");
  for (Kind k : kAllKinds) {
    auto it = by_kind.find(k);
    w.sample("reclaim_resource_bytes", label("kind", std::string(kind_name(k))), it == by_kind.end() ? 0 : it->second.bytes);
  }
  w.family("reclaim_ledger_device_bytes", "gauge",
           "Bytes of the live resources on the ledger by where they are: host memory or an accelerator.");
  for (const auto& [place, t] : ledger.by_device()) w.sample("reclaim_ledger_device_bytes", label("device", place), t.bytes);
  w.family("reclaim_release_failures_total", "counter", "Releases whose cleanup threw.");
  w.sample("reclaim_release_failures_total", "", ledger.failed_releases());
}

// The accelerators' runtime state: one sample a state, 1 for the one it is in
// (absent where there is no accelerator).
void device_families(Writer& w) {
  const DeviceLifeStatus d = device_life();
  if (d.state == DeviceState::absent) return;
  w.family("reclaim_device_state", "gauge",
           "The accelerators' runtime state (driver context, pipelines, threads): in_use, idle or released.");
  for (DeviceState s : {DeviceState::in_use, DeviceState::idle, DeviceState::released}) {
    w.sample("reclaim_device_state", label("state", std::string(device_state_name(s))), d.state == s ? 1 : 0);
  }
  w.family("reclaim_device_releases_total", "counter", "Times the accelerators' runtime state was given back when idle.");
  w.sample("reclaim_device_releases_total", "", d.releases);
  w.family("reclaim_device_bring_ups_total", "counter", "Times a released accelerator was brought up again for a model.");
  w.sample("reclaim_device_bring_ups_total", "", d.bring_ups);
}

void registry_families(Writer& w, const Registry& registry) {
  const std::vector<ModelStatus> models = registry.list();
  for (const ModelField& f : model_fields()) {
    if (f.metric) model_family(w, f, models);
  }
  w.family("reclaim_memory_budget_bytes", "gauge", "The memory budget (0: none).");
  w.sample("reclaim_memory_budget_bytes", "", registry.options().memory_budget);
  w.family("reclaim_memory_budget_device_bytes", "gauge", "The memory budget of each place given one (host, an accelerator).");
  for (const auto& [place, bytes] : registry.options().memory_budget_at) {
    w.sample("reclaim_memory_budget_device_bytes", label("device", place), bytes);
  }
  w.family("reclaim_memory_accounted_bytes", "gauge", "What the budget counts now.");
  w.sample("reclaim_memory_accounted_bytes", "", registry.accounted());
  device_families(w);
}

void request_families(Writer& w, const RequestCounts& stats) {
  w.family("reclaim_requests_total", "counter", "Completion requests by outcome.");
  w.sample("reclaim_requests_total", label("outcome", "ok"), stats.ok.load());
  w.sample("reclaim_requests_total", label("outcome", "error"), stats.error.load());
  w.sample("reclaim_requests_total", label("outcome", "cancelled"), stats.cancelled.load());
  w.sample("reclaim_requests_total", label("outcome", "client_gone"), stats.client_gone.load());
  w.family("reclaim_requests_in_flight", "gauge", "Completion requests being served or waiting for their model.");
  w.sample("reclaim_requests_in_flight", "", stats.in_flight.load());
  w.family("reclaim_tokens_total", "counter", "Tokens processed.");
  w.sample("reclaim_tokens_total", label("type", "prompt"), stats.prompt_tokens.load());
  w.sample("reclaim_tokens_total", label("type", "completion"), stats.completion_tokens.load());
  w.family("reclaim_prompt_tokens_total", "counter",
           "Prompt tokens by where their KV cells came from: the prompt cache, or a decode.");
  const uint64_t prompt = stats.prompt_tokens.load(), cached = std::min(stats.cached_prompt_tokens.load(), prompt);
  w.sample("reclaim_prompt_tokens_total", label("source", "cache"), cached);
  w.sample("reclaim_prompt_tokens_total", label("source", "decoded"), prompt - cached);
  w.histogram("reclaim_first_token_seconds", "Time from a completion's start on its model (after any wait for it) to its first token.",
              stats.first_token_seconds.counts());
  w.histogram("reclaim_generation_tokens_per_second", "Each completion's generation rate, in tokens a second.",
              stats.tokens_per_second.counts());
}

void scheduler_families(Writer& w, const Registry& registry) {
  const SchedulerStats sched = registry.scheduler();
  w.single("reclaim_queue_waiting", "gauge", "Requests waiting now for a slot, a load or a swap.", sched.waiting);
  w.histogram("reclaim_queue_wait_seconds", "Time requests waited for a slot, a load or a swap.", sched.wait_histogram);
  w.histogram("reclaim_model_load_seconds", "Time each load of a model took.", sched.load_histogram);
  w.histogram("reclaim_model_unload_seconds", "Time each unload of a model took.", sched.unload_histogram);
  w.single("reclaim_queue_timeouts_total", "counter", "Requests that waited past --queue-timeout.", sched.timeouts);
  w.single("reclaim_queue_client_gone_total", "counter", "Requests whose client left while they waited.", sched.gone);
  w.single("reclaim_swaps_total", "counter", "Models unloaded to make room for a model that waited.", sched.evictions);
  w.single("reclaim_drains_total", "counter", "Busy models chosen to drain to make room.", sched.drains);
  w.family("reclaim_room_loads_total", "counter",
           "Loads of models that waited in the line, by how the room was found: beside (at once), behind (loads and "
           "unloads under way), evicted (an idle model unloaded), drained (busy models finished first).");
  for (int i = 0; i < kRoomHows; ++i) {
    w.sample("reclaim_room_loads_total", label("how", room_how_name(static_cast<RoomHow>(i))), sched.room_loads[i]);
  }
  w.family("reclaim_room_wait_seconds_total", "counter",
           "The waits in the line of those loads' first requests, summed by how the room was found.");
  for (int i = 0; i < kRoomHows; ++i) {
    w.sample("reclaim_room_wait_seconds_total", label("how", room_how_name(static_cast<RoomHow>(i))),
             sched.room_wait_seconds[i]);
  }
  w.single("reclaim_prompt_cache_drops_total", "counter",
         "Times the prompt caches' saves were dropped to make room, before any model.", sched.cache_drops);
}

// llama-server's own families, under its names (its dashboards and tests
// read them), for the whole server: the same counts as reclaim's above.
void llama_server_families(Writer& w, const RequestCounts& stats, const SchedulerStats& sched) {
  const uint64_t decoded = stats.decoded_prompt_tokens.load(), cached = stats.cached_prompt_tokens.load();
  const double prompt_s = static_cast<double>(stats.prompt_us.load()) / 1e6;
  const double generate_s = static_cast<double>(stats.generate_us.load()) / 1e6;
  const uint64_t predicted = stats.completion_tokens.load();
  const auto rate = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  w.single("llamacpp:prompt_tokens_total", "counter", "Prompt tokens decoded (not taken from the prompt cache).",
           decoded);
  w.single("llamacpp:prompt_tokens_cached_total", "counter", "Prompt tokens taken from the prompt cache.", cached);
  w.single("llamacpp:prompt_seconds_total", "counter", "Time spent decoding prompts.", prompt_s);
  w.single("llamacpp:tokens_predicted_total", "counter", "Tokens generated.", predicted);
  w.single("llamacpp:tokens_predicted_seconds_total", "counter", "Time spent generating.", generate_s);
  w.single("llamacpp:n_decode_total", "counter", "Decode steps of every model's completions.", sched.decode_steps);
  w.single("llamacpp:n_tokens_max", "counter", "Most tokens (prompt and generated) one completion held.",
           stats.most_tokens.load());
  w.single("llamacpp:spec_decode_num_draft_tokens_total", "counter", "Draft tokens decoded (speculative decoding).",
           sched.guessed);
  w.single("llamacpp:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens the models picked themselves.",
           sched.guesses_kept);
  w.single("llamacpp:spec_decode_num_drafts_total", "counter", "Drafts decoded (a sequence's step with a draft).",
           sched.guesses);
  w.single("llamacpp:prompt_tokens_seconds", "gauge", "Prompt tokens decoded a second, over all completions.",
           rate(static_cast<double>(decoded), prompt_s));
  w.single("llamacpp:predicted_tokens_seconds", "gauge", "Tokens generated a second, over all completions.",
           rate(static_cast<double>(predicted), generate_s));
  const int64_t in_flight = stats.in_flight.load();
  w.single("llamacpp:requests_processing", "gauge", "Requests being served (not waiting).",
           std::max<int64_t>(0, in_flight - sched.waiting));
  w.single("llamacpp:requests_deferred", "gauge", "Requests waiting for a slot, a load or a swap.", sched.waiting);
  w.single("llamacpp:n_busy_slots_per_decode", "gauge", "Sequences in a decode step, on average.",
           sched.decode_steps > 0 ? static_cast<double>(sched.busy_in_steps) / static_cast<double>(sched.decode_steps) : 0.0);
}

void http_families(Writer& w, const HttpStats& http) {
  w.family("reclaim_http_threads", "gauge", "HTTP threads running, and those busy with a connection.");
  w.sample("reclaim_http_threads", label("state", "all"), http.threads);
  w.sample("reclaim_http_threads", label("state", "busy"), http.busy);
  w.single("reclaim_http_threads_peak", "gauge", "Most HTTP threads at once since the start.", http.peak);
  w.single("reclaim_http_connections_waiting", "gauge", "Connections waiting for a thread (past --max-connections).",
         http.queued);
  w.single("reclaim_http_connections", "gauge", "Open connections.", http.connections);
  w.single("reclaim_http_connections_cut_total", "counter",
         "Connections cut for taking longer than --read-timeout over a request.", http.cut);
  w.single("reclaim_resumable_streams", "gauge", "Resumable streams kept (X-Conversation-Id), running or finished.",
           http.streams);
  w.single("reclaim_resumable_stream_bytes", "gauge", "Host memory of their kept bytes.", http.stream_bytes);
}

}  // namespace

std::string metrics_text(const Registry& registry, const Usage& baseline, const RequestCounts& stats, const HttpStats& http) {
  Writer w;
  process_families(w, baseline);
  ledger_families(w);
  registry_families(w, registry);
  request_families(w, stats);
  scheduler_families(w, registry);
  llama_server_families(w, stats, registry.scheduler());
  http_families(w, http);
  return w.str();
}

}  // namespace reclaim::server
