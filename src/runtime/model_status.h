// What the registry tells of one model at a moment: a copy, taken under its
// lock, that every view of the models reads (server/model_fields.h names
// each field once for all of them).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model_life.h"
#include "runtime/room.h"

namespace reclaim {

struct ModelStatus {
  std::string name, path;
  std::string mmproj;  // its image projector's file; empty: it takes text only
  std::vector<std::string> aliases;
  ModelState state = ModelState::unloaded;
  Life life = Life::unloaded;  // the same, as the registry's state machine has it (runtime/model_life.h)
  bool pinned = false;
  int in_flight = 0;
  int queued = 0;            // requests waiting: for a running slot, a load or a swap
  bool draining = false;     // chosen to make room: admits no new request
  int line_position = 0;     // 1-based place in the line for room; 0: not in it
  float load_progress = 0;   // 0..1 while loading
  int64_t estimate = 0;      // bytes the budget counts (host + device), 0 before the first load
  Places estimate_by_device;  // the same by place: what a budget for each place counts
  int64_t loaded_bytes = 0;  // on the ledger under the model's scope, while loaded
  // The same by where they are: "host", then each accelerator ("vulkan0").
  Places bytes_by_device;
  uint64_t loads = 0, unloads = 0;
  double last_load_ms = 0, last_unload_ms = 0;
  std::string last_room;        // how its last load found room (RoomHow's name); empty before
  double last_room_wait_s = 0;  // the wait in the line before that load
  std::chrono::system_clock::time_point last_use{};
  // When keep-alive unloads it: once idle, its deadline; while busy, its
  // keep-alive from now. Unset: never (pinned, keep-alive < 0) or not loaded.
  std::optional<std::chrono::system_clock::time_point> expires_at;
  std::string last_error;
  // With --parallel, while loaded: the batch's sequences, those in use, and
  // its decodes and their tokens since the load (tokens / steps is how many
  // requests a decode served, on average).
  int sequences = 0;
  int sequences_active = 0;
  std::vector<bool> sequences_in_use;  // by sequence id (llama-server's slots)
  uint64_t decode_steps = 0, decoded_tokens = 0;
  bool reload_pending = false;  // new settings wait for it to be idle, then unloaded
  bool removing = false;        // gone from the configuration: unloaded once idle, then dropped
  uint64_t cached_tokens = 0;  // whose KV cells the prompt cache keeps
  uint64_t saved_bytes = 0, saved = 0;  // the prompt cache's saves in host memory
};

}  // namespace reclaim
