#include "engine/core_turns.h"

#include <ggml-cpu.h>

#include <atomic>
#include <cassert>
#include <condition_variable>
#include <cstdlib>
#include <cstring>

#include "engine/model.h"

namespace reclaim {

namespace {

struct Turns {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next_ticket = 0, serving = 0;  // first come, first served
  std::atomic<int> pools{0};
  std::atomic<int> at_once{0};
  std::atomic<int> max_at_once{0};
  std::atomic<uint64_t> turns{0}, waited{0}, pauses{0};
  std::atomic<bool> on{[] {
    const char* e = std::getenv("RECLAIM_CORE_TURNS");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
};

Turns& turns() {
  static Turns* t = new Turns;  // used by threads that may outlive static destruction
  return *t;
}

// The model whose step this thread holds: its decodes take no second turn.
thread_local const Model* t_stepping = nullptr;

}  // namespace

DecodeTurn::DecodeTurn(Model& model) {
  if (t_stepping == &model) return;
  // Another model's turn held by this thread would wait on itself.
  assert(t_stepping == nullptr);
  model_lock_ = std::unique_lock(model.decode_mutex());
  Turns& t = turns();
  ggml_threadpool* pool = model.threadpool();
  if (!pool || !model.computes_on_cpu() || !t.on.load()) return;
  {
    std::unique_lock lock(t.mu);
    const uint64_t mine = t.next_ticket++;
    if (t.serving != mine) {
      t.waited.fetch_add(1);
      t.cv.wait(lock, [&] { return t.serving == mine; });
    }
  }
  pool_ = pool;
  t.turns.fetch_add(1);
  const int now = t.at_once.fetch_add(1) + 1;
  for (int seen = t.max_at_once.load(); now > seen && !t.max_at_once.compare_exchange_weak(seen, now);) {
  }
}

DecodeTurn::~DecodeTurn() {
  if (!pool_) return;
  Turns& t = turns();
  t.at_once.fetch_sub(1);
  // Asleep before the next model's step starts, where another waits for
  // its turn (an idle model loaded beside a busy one costs it nothing).
  bool waiting;
  {
    std::lock_guard lock(t.mu);
    waiting = t.next_ticket > t.serving + 1;
  }
  if (waiting) {
    ggml_threadpool_pause(pool_);
    t.pauses.fetch_add(1);
  }
  {
    std::lock_guard lock(t.mu);
    ++t.serving;
  }
  t.cv.notify_all();
}

StepTurn::StepTurn(Model& model) {
  if (t_stepping == &model) return;
  turn_.emplace(model);
  t_stepping = &model;
}

StepTurn::~StepTurn() {
  if (!turn_) return;
  t_stepping = nullptr;
  turn_.reset();
}

void core_pool_born() { turns().pools.fetch_add(1); }
void core_pool_gone() { turns().pools.fetch_sub(1); }

CoreTurnStats core_turn_stats() {
  Turns& t = turns();
  return {t.turns.load(), t.waited.load(), t.pauses.load(), t.max_at_once.load(), t.pools.load()};
}

void set_core_turns(bool on) { turns().on = on; }
bool core_turns() { return turns().on.load(); }

}  // namespace reclaim
