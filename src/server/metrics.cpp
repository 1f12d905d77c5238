#include "server/metrics.h"

#include <sstream>

#include "core/ledger.h"

namespace reclaim::server {

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
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string label(const char* key, const std::string& value) { return std::string(key) + "=\"" + label_value(value) + "\""; }

}  // namespace

std::string metrics_text(const Registry& registry, const Usage& baseline, const RequestStats& stats) {
  Writer w;
  const Usage now = Usage::capture();
  const Usage residue = now - baseline;
  w.family("reclaim_process_figure", "gauge", "Process figures from /proc/self, the heap and the accelerators (bytes or counts).");
  for (const Figure& f : usage_figures()) w.sample("reclaim_process_figure", label("figure", f.name), now.*f.field);
  w.family("reclaim_process_residue", "gauge", "Process figures minus the baseline taken when the server started listening.");
  for (const Figure& f : usage_figures()) w.sample("reclaim_process_residue", label("figure", f.name), residue.*f.field);

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
  w.family("reclaim_release_failures_total", "counter", "Releases whose cleanup threw.");
  w.sample("reclaim_release_failures_total", "", ledger.failed_releases());

  const std::vector<ModelStatus> models = registry.list();
  w.family("reclaim_model_loaded", "gauge", "1 when the model is loaded.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_loaded", label("model", m.name), m.state == ModelState::loaded ? 1 : 0);
  w.family("reclaim_model_bytes", "gauge", "Bytes on the ledger under the model (weights, contexts, requests).");
  for (const ModelStatus& m : models) w.sample("reclaim_model_bytes", label("model", m.name), m.loaded_bytes);
  w.family("reclaim_model_estimate_bytes", "gauge", "What the budget counts for the model: the engine's estimate of its last load.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_estimate_bytes", label("model", m.name), m.estimate);
  w.family("reclaim_model_in_flight", "gauge", "Requests holding the model.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_in_flight", label("model", m.name), m.in_flight);
  w.family("reclaim_model_sequences_active", "gauge", "The model's batch sequences in use (--parallel).");
  for (const ModelStatus& m : models) w.sample("reclaim_model_sequences_active", label("model", m.name), m.sequences_active);
  w.family("reclaim_model_decode_steps_total", "counter", "Decodes of the model's batch since its load.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_decode_steps_total", label("model", m.name), m.decode_steps);
  w.family("reclaim_model_decoded_tokens_total", "counter", "Tokens in those decodes (prompts and generated).");
  for (const ModelStatus& m : models) w.sample("reclaim_model_decoded_tokens_total", label("model", m.name), m.decoded_tokens);
  w.family("reclaim_model_loads_total", "counter", "Loads of the model.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_loads_total", label("model", m.name), m.loads);
  w.family("reclaim_model_unloads_total", "counter", "Unloads of the model.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_unloads_total", label("model", m.name), m.unloads);
  w.family("reclaim_model_last_load_seconds", "gauge", "Duration of the model's last load.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_last_load_seconds", label("model", m.name), m.last_load_ms / 1000);
  w.family("reclaim_model_last_unload_seconds", "gauge", "Duration of the model's last unload.");
  for (const ModelStatus& m : models) w.sample("reclaim_model_last_unload_seconds", label("model", m.name), m.last_unload_ms / 1000);

  w.family("reclaim_memory_budget_bytes", "gauge", "The memory budget (0: none).");
  w.sample("reclaim_memory_budget_bytes", "", registry.options().memory_budget);
  w.family("reclaim_memory_accounted_bytes", "gauge", "What the budget counts now.");
  w.sample("reclaim_memory_accounted_bytes", "", registry.accounted());

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
  return w.str();
}

}  // namespace reclaim::server
