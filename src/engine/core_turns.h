// The cores taken in turns by the models that compute on them. Each model
// on the CPU has a ggml pool of a thread per core; two pools computing at
// once put twice the threads on the cores, and each step waits on its
// slowest thread, which the other pool's threads keep off its core
// (bench-two-models measures two models at once with and without turns).
// So a decode step takes the process's turn, first come first served; a
// pool that finishes its step while another model waits sleeps at once
// instead of spinning for its next one (ggml's polling), and ggml wakes it
// at its next graph. A model that nobody waits on runs as before. Models on
// an accelerator compute there and take no turn.
// A model's step is its decode and the sampling of what it computed: the
// turn covers both (StepTurn), since a thread sampling beside the other
// model's pool is a third thread on two cores, and that step waits on the
// thread the scheduler put aside (bench-two-models: the sampling took 1.2 ms
// a step beside the other's decode and 0.04 ms alone, and each decode 1 ms
// more).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

struct ggml_threadpool;

namespace reclaim {

class Model;

// Held for one decode step: the model's own decode mutex (its pool runs one
// graph at a time), then the process's turn where the model computes on
// the CPU.
class DecodeTurn {
 public:
  explicit DecodeTurn(Model& model);
  ~DecodeTurn();
  DecodeTurn(const DecodeTurn&) = delete;
  DecodeTurn& operator=(const DecodeTurn&) = delete;

 private:
  std::unique_lock<std::mutex> model_lock_;
  ggml_threadpool* pool_ = nullptr;  // set when this step took a turn
};

// A model's whole step held as one turn: its decodes (their DecodeTurns
// take nothing more) and the work on their output, until destroyed. The
// thread that holds it decodes only this model meanwhile.
class StepTurn {
 public:
  explicit StepTurn(Model& model);
  ~StepTurn();
  StepTurn(const StepTurn&) = delete;
  StepTurn& operator=(const StepTurn&) = delete;

 private:
  std::optional<DecodeTurn> turn_;  // empty where the thread holds this model's step already
};

// A CPU pool that takes turns, from its model's load to its unload.
void core_pool_born();
void core_pool_gone();

struct CoreTurnStats {
  uint64_t turns = 0;           // steps that took a turn
  uint64_t waited = 0;          // of them, those that waited for another's
  uint64_t pauses = 0;          // pools put to sleep after their step
  int max_at_once = 0;          // steps (decode and sampling) at once, at most (1 with turns on)
  int pools = 0;                // CPU pools alive now
};
CoreTurnStats core_turn_stats();
// On by default (RECLAIM_CORE_TURNS=0 turns them off); the two-model
// benchmark measures both in one run.
void set_core_turns(bool on);
bool core_turns();

}  // namespace reclaim
