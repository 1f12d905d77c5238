#include "runtime/model_life.h"

#include <stdexcept>
#include <string>

namespace reclaim {

namespace {

struct Transition {
  Life from;
  LifeEvent event;
  Life to;
};

// Every change a model's life may make; anything else is refused.
constexpr Transition kTable[] = {
    {Life::unloaded, LifeEvent::load, Life::loading},
    {Life::reload_due, LifeEvent::load, Life::loading},
    {Life::loading, LifeEvent::loaded, Life::serving},
    {Life::loading, LifeEvent::loaded_stale, Life::reloading},
    {Life::loading, LifeEvent::load_failed, Life::unloaded},
    {Life::serving, LifeEvent::reconfigure, Life::reloading},
    {Life::reloading, LifeEvent::reload_dropped, Life::serving},
    {Life::serving, LifeEvent::drain, Life::draining},
    {Life::reloading, LifeEvent::drain, Life::draining},
    {Life::draining, LifeEvent::resume, Life::serving},
    {Life::draining, LifeEvent::resume_stale, Life::reloading},
    {Life::serving, LifeEvent::close, Life::closing},
    {Life::draining, LifeEvent::close, Life::closing},
    {Life::reloading, LifeEvent::close, Life::closing},
    {Life::closing, LifeEvent::idle, Life::unloading},
    {Life::unloading, LifeEvent::freed, Life::unloaded},
    {Life::unloaded, LifeEvent::mark_reload, Life::reload_due},
};

}  // namespace

std::optional<Life> next_life(Life from, LifeEvent event) {
  for (const Transition& t : kTable) {
    if (t.from == from && t.event == event) return t.to;
  }
  return std::nullopt;
}

Life apply_life(Life from, LifeEvent event) {
  if (std::optional<Life> to = next_life(from, event)) return *to;
  throw std::logic_error(std::string("a model's life cannot go from ") + life_name(from) + " by " +
                         life_event_name(event));
}

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::unloaded: return "unloaded";
    case ModelState::loading: return "loading";
    case ModelState::loaded: return "loaded";
    case ModelState::unloading: return "unloading";
  }
  return "?";
}

ModelState state_of(Life l) {
  switch (l) {
    case Life::unloaded:
    case Life::reload_due: return ModelState::unloaded;
    case Life::loading: return ModelState::loading;
    case Life::serving:
    case Life::draining:
    case Life::reloading:
    case Life::closing: return ModelState::loaded;
    case Life::unloading: return ModelState::unloading;
  }
  return ModelState::unloaded;
}

const char* life_name(Life l) {
  switch (l) {
    case Life::unloaded: return "unloaded";
    case Life::reload_due: return "reload_due";
    case Life::loading: return "loading";
    case Life::serving: return "serving";
    case Life::draining: return "draining";
    case Life::reloading: return "reloading";
    case Life::closing: return "closing";
    case Life::unloading: return "unloading";
  }
  return "?";
}

const char* life_event_name(LifeEvent e) {
  switch (e) {
    case LifeEvent::load: return "load";
    case LifeEvent::loaded: return "loaded";
    case LifeEvent::loaded_stale: return "loaded_stale";
    case LifeEvent::load_failed: return "load_failed";
    case LifeEvent::reconfigure: return "reconfigure";
    case LifeEvent::reload_dropped: return "reload_dropped";
    case LifeEvent::drain: return "drain";
    case LifeEvent::resume: return "resume";
    case LifeEvent::resume_stale: return "resume_stale";
    case LifeEvent::close: return "close";
    case LifeEvent::idle: return "idle";
    case LifeEvent::freed: return "freed";
    case LifeEvent::mark_reload: return "mark_reload";
  }
  return "?";
}

}  // namespace reclaim
