// The models as a reloaded configuration has them (Registry::reconfigure):
// what is added, what takes new settings now or once idle, what is removed
// once nothing refers to it.
#include <algorithm>
#include <utility>

#include "engine/batcher.h"
#include "runtime/registry_entry.h"

namespace reclaim {

void Registry::validate(const std::vector<ModelSpec>& models) const {
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
      (void)context_params(Entry(m));
    } catch (const std::exception& ex) {
      throw Error("model '" + m.name + "': " + ex.what());
    }
  }
}

Registry::Reconfigured Registry::reconfigure(std::vector<ModelSpec> models) {
  validate(models);
  Reconfigured r;
  std::unique_lock lock(mu_);
  std::vector<std::string> kept;
  for (ModelSpec& m : models) {
    kept.push_back(m.name);
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.spec.name == m.name; });
    if (it == entries_.end()) {
      entries_.emplace_back(std::move(m));
      ++r.added;
      continue;
    }
    Entry& e = *it;
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
  for (Entry& e : entries_) {
    if (e.retired || std::find(kept.begin(), kept.end(), e.spec.name) != kept.end()) continue;
    e.retired = true;
    e.next_spec.reset();
    if (e.life == Life::reloading) e.change(LifeEvent::reload_dropped);
    ++r.removed;
  }
  sweep_locked();
  reaper_cv_.notify_all();
  cv_.notify_all();
  return r;
}

void Registry::sweep_locked() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = *it;
    const bool held = holds_room(e.life) || e.in_flight > 0 || e.queued > 0 || e.pending_admits > 0 ||
                      std::any_of(line_.begin(), line_.end(), [&](const Turn& t) { return t.entry == &e; });
    it = e.retired && !held ? entries_.erase(it) : std::next(it);
  }
}

}  // namespace reclaim
