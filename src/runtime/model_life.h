// A model's life in the registry: one state at a time, changed only by the
// events below, through the one table in model_life.cpp. The registry holds
// its lock across each change; what a state allows (admitting a request,
// counting against the budget, being chosen for room) is read from the state
// alone, never from flags beside it.
//
//   unloaded, reload_due --load--> loading --loaded--> serving
//                                  loading --loaded_stale--> reloading
//                                  loading --load_failed--> unloaded
//   serving --reconfigure--> reloading --reload_dropped--> serving
//   serving, reloading --drain--> draining --resume--> serving
//                                 draining --resume_stale--> reloading
//   serving, draining, reloading --close--> closing --idle--> unloading
//   unloading --freed--> unloaded --mark_reload--> reload_due
//
// What is not a state: the settings a reload will take (the catalogue's
// next spec), a model removed from the configuration (retired: found by no
// name, dropped once unloaded), and counts (requests in flight, waiting, or
// admitted by a turn and not yet holding their lease).
#pragma once

#include <optional>

namespace reclaim {

enum class Life {
  unloaded,    // nothing of it in memory
  reload_due,  // unloaded to take new settings: its waiting requests load it
               // again, even where requests may not load models (--no-autoload)
  loading,     // a turn is loading it; the budget counts its estimate
  serving,     // loaded, and admits requests
  draining,    // loaded, chosen to make room: admits none; its requests run
               // until the drain's timeout, then are cancelled
  reloading,   // loaded, new settings wait: admits none; unloaded once idle
  closing,     // an unload waits for its requests (or cancelled them)
  unloading,   // being freed
};

enum class LifeEvent {
  load,          // a turn takes it: unloaded or reload_due -> loading
  loaded,        // loading -> serving
  loaded_stale,  // loading -> reloading: new settings came while it loaded
  load_failed,   // loading -> unloaded
  // serving -> reloading. A loading or draining model keeps its state (the
  // stale events take it there); one on its way out takes the settings once
  // freed.
  reconfigure,
  reload_dropped,  // reloading -> serving: the configuration went back to what it runs with
  drain,         // serving or reloading -> draining
  resume,        // draining -> serving: the room was found, or the head left
  resume_stale,  // draining -> reloading, where new settings wait
  close,         // serving, draining or reloading -> closing
  idle,          // closing -> unloading: its last request is gone
  freed,         // unloading -> unloaded
  mark_reload,   // unloaded -> reload_due
};

inline constexpr Life kAllLives[] = {Life::unloaded, Life::reload_due, Life::loading,  Life::serving,
                                     Life::draining, Life::reloading,  Life::closing,  Life::unloading};
inline constexpr LifeEvent kAllLifeEvents[] = {
    LifeEvent::load,        LifeEvent::loaded, LifeEvent::loaded_stale, LifeEvent::load_failed,
    LifeEvent::reconfigure, LifeEvent::reload_dropped, LifeEvent::drain,  LifeEvent::resume,       LifeEvent::resume_stale,
    LifeEvent::close,       LifeEvent::idle,   LifeEvent::freed,        LifeEvent::mark_reload};

// The state `event` takes `from` to; none where the table refuses it.
std::optional<Life> next_life(Life from, LifeEvent event);
// The same, for a change the registry makes: a refused one is a bug in the
// registry, and throws std::logic_error naming both.
Life apply_life(Life from, LifeEvent event);

const char* life_name(Life l);
const char* life_event_name(LifeEvent e);

// What the APIs show: loaded from serving to closing.
enum class ModelState { unloaded, loading, loaded, unloading };
const char* model_state_name(ModelState s);
ModelState state_of(Life l);

// What each state allows.
inline bool admits_requests(Life l) { return l == Life::serving; }
// In memory, or about to be: the budget counts its reservation.
inline bool holds_room(Life l) { return l != Life::unloaded && l != Life::reload_due; }
// Loaded and not on its way out: it may be chosen to give up its room.
inline bool may_give_room(Life l) { return l == Life::serving || l == Life::draining || l == Life::reloading; }
// On its way out: the room comes back once it is freed.
inline bool leaving(Life l) { return l == Life::closing || l == Life::unloading; }
// Needs a turn in the line (and a load) before it admits a request.
inline bool needs_turn(Life l) { return l == Life::unloaded || l == Life::reload_due || l == Life::draining; }

}  // namespace reclaim
