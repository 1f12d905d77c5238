#include "runtime/catalogue.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "engine/llama_runtime.h"
#include "runtime/registry_errors.h"

namespace reclaim {

Catalogue::Catalogue(const RegistryOptions& options, std::vector<ModelSpec> models) : options_(options) {
  // The batch's context parameters refuse a bad --parallel or --batch: now,
  // rather than at the first load.
  (void)context_params(ModelEntry(ModelSpec{}));
  validate(models);
  for (ModelSpec& m : models) entries_.emplace_back(std::move(m));
}

void Catalogue::check_name(const std::string& name) {
  // Names as users write them: Ollama's tags (qwen2.5:7b) and hub ids
  // (org/model:Q4_K_M). A name is only ever looked up among the configured
  // models, never opened; still, nothing that reads as a path is a name, so
  // that no mistake elsewhere could make one of it.
  if (name.empty()) throw BadModelName("the model name is empty");
  if (name.size() > 256) throw BadModelName("the model name is longer than 256 characters");
  // File names from --models-dir are names too ("llama-3 (q4).gguf"), so
  // any printable character is; what is refused reads as a path.
  const bool printable = std::none_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f || c == '\\';
  });
  bool dot_segment = false;
  for (size_t at = 0; at <= name.size();) {
    const size_t end = std::min(name.find('/', at), name.size());
    const std::string_view seg(name.data() + at, end - at);
    dot_segment = dot_segment || seg.empty() || seg == "." || seg == "..";
    at = end + 1;
  }
  if (!printable || dot_segment) {
    throw BadModelName("model name '" + name +
                       "' is not a name: no control characters or backslashes, and no empty, '.' or '..' part "
                       "between slashes; use a name from /v1/models");
  }
}

ModelEntry& Catalogue::find(const std::string& name) {
  for (ModelEntry& e : entries_) {
    if (e.spec.name == name && !e.retired) return e;
  }
  for (ModelEntry& e : entries_) {
    const std::vector<std::string>& a = e.spec.settings.aliases;
    if (!e.retired && std::find(a.begin(), a.end(), name) != a.end()) return e;
  }
  throw UnknownModel("model '" + name + "' is not one this server has (see /v1/models)");
}

const ModelEntry& Catalogue::find(const std::string& name) const {
  return const_cast<Catalogue*>(this)->find(name);
}

void Catalogue::validate(const std::vector<ModelSpec>& models) const {
  std::vector<std::string> names;
  for (const ModelSpec& m : models) {
    names.push_back(m.name);
    names.insert(names.end(), m.settings.aliases.begin(), m.settings.aliases.end());
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 0; i < names.size(); ++i) {
    check_name(names[i]);
    if (i > 0 && names[i] == names[i - 1]) throw Error("two models are named '" + names[i] + "'");
  }
  for (const ModelSpec& m : models) {
    try {
      (void)context_params(ModelEntry(m));
    } catch (const std::exception& ex) {
      throw Error("model '" + m.name + "': " + ex.what());
    }
  }
}

// A new name is added. A model whose path or load settings changed takes
// them at once if it holds no room; if it does, it takes no new request from
// then (reloading) and takes them once unloaded. Its other settings it takes
// at once. A name no longer there is retired.
Reconfigured Catalogue::reconfigure(std::vector<ModelSpec> models) {
  validate(models);
  Reconfigured r;
  std::vector<std::string> kept;
  for (ModelSpec& m : models) {
    kept.push_back(m.name);
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const ModelEntry& e) { return e.spec.name == m.name; });
    if (it == entries_.end()) {
      entries_.emplace_back(std::move(m));
      ++r.added;
      continue;
    }
    ModelEntry& e = *it;
    const bool was_retired = std::exchange(e.retired, false);
    const ModelSpec& now = e.next_spec ? *e.next_spec : e.spec;
    if (now == m && !was_retired) continue;
    ++(was_retired ? r.added : r.changed);
    const bool reload = m.path != e.spec.path || needs_reload(e.spec.settings, m.settings);
    if (!reload) {
      e.spec = std::move(m);
      e.next_spec.reset();
      if (e.life == Life::reloading) e.change(LifeEvent::reload_dropped);
    } else if (!holds_room(e.life)) {
      e.spec = std::move(m);
      e.next_spec.reset();
      e.estimated_file.clear();  // the estimate was of the old context
      ++e.spec_generation;
    } else {
      // Its names, template, keep-alive, pin and defaults at once, as
      // without a reload (a new alias is known now; its requests, like any,
      // wait for the reload: scheduling.cpp); the rest once it is unloaded.
      ModelSpec now_spec = m;
      now_spec.path = e.spec.path;
      now_spec.settings = taken_while_loaded(e.spec.settings, m.settings);
      e.spec = std::move(now_spec);
      e.next_spec = std::move(m);
      if (e.life == Life::serving) e.change(LifeEvent::reconfigure);
    }
  }
  for (ModelEntry& e : entries_) {
    if (e.retired || std::find(kept.begin(), kept.end(), e.spec.name) != kept.end()) continue;
    e.retired = true;
    e.next_spec.reset();
    if (e.life == Life::reloading) e.change(LifeEvent::reload_dropped);
    ++r.removed;
  }
  return r;
}

void Catalogue::sweep(const Line& line) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const ModelEntry& e = *it;
    const bool held = holds_room(e.life) || e.in_flight > 0 || e.queued > 0 || e.pending_admits > 0 ||
                      e.watchers > 0 || line.holds(e);
    it = e.retired && !held ? entries_.erase(it) : std::next(it);
  }
}

BatcherOptions Catalogue::batching_of(const ModelEntry& e) const {
  const ModelSettings& s = e.spec.settings;
  BatcherOptions b{s.parallel.value_or(options_.parallel), options_.session};
  if (s.n_ctx) b.session.n_ctx = *s.n_ctx;
  if (s.n_threads) b.session.n_threads = *s.n_threads;
  b.speculation = options_.speculation;
  // Each name was checked where it was read (--config, --spec-type).
  if (s.spec_type) speculation_from_name(*s.spec_type, b.speculation.kind);
  if (s.draft_max) b.speculation.draft_max = *s.draft_max;
  if (s.draft_min) b.speculation.draft_min = *s.draft_min;
  if (s.draft) {
    b.speculation.kind = Speculation::Kind::draft;
    b.speculation.draft = *s.draft;
  }
  // A model's own fewest may be above the server's most, or the reverse.
  b.speculation.draft_min = std::min(b.speculation.draft_min, b.speculation.draft_max);
  return b;
}

Millis Catalogue::keep_alive_of(const ModelEntry& e) const { return e.spec.settings.keep_alive.value_or(options_.keep_alive); }

int Catalogue::max_running_of(const ModelEntry& e) const {
  // A model of its own parallelism runs as many requests as it has
  // sequences, as serve's --parallel does for all.
  return e.spec.settings.parallel ? *e.spec.settings.parallel : options_.max_running;
}

llama_context_params Catalogue::context_params(const ModelEntry& e) const {
  const int32_t n = e.spec.settings.n_threads.value_or(options_.n_threads);
  return batch_context_params(batching_of(e), 0, n > 0 ? n : default_threads());
}

std::optional<VetRequest> Catalogue::draft_vet_request(const ModelEntry& e) const {
  const BatcherOptions b = batching_of(e);
  if (b.speculation.kind != Speculation::Kind::draft) return std::nullopt;
  const int32_t n = e.spec.settings.n_threads.value_or(options_.n_threads);
  VetRequest q;
  q.path = b.speculation.draft;
  q.n_gpu_layers = e.spec.settings.n_gpu_layers.value_or(options_.n_gpu_layers);
  q.context = draft_context_params(b.n_seq, b.session.n_ctx, b.session.n_batch, n > 0 ? n : default_threads());
  return q;
}

VetRequest Catalogue::vet_request(const ModelEntry& e) const {
  VetRequest q;
  q.path = e.spec.path;
  q.mmproj = e.spec.settings.mmproj.value_or("");
  q.n_gpu_layers = e.spec.settings.n_gpu_layers.value_or(options_.n_gpu_layers);
  q.context = context_params(e);
  return q;
}

}  // namespace reclaim
