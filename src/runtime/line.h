// The scheduler's line: the models waiting for room, first in first out.
// Requests for the same model share its place (a Turn); only the place at
// the head makes room and loads (docs/architecture.md, "Scheduling"). The
// tickets it hands out also order the requests that wait for a running slot
// on one model. Used under the registry's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <string>
#include <vector>

namespace reclaim {

struct ModelEntry;

// How a model that waited in the line found its room, worst first in the
// order a wait can take: after other models drained (their requests ran to
// their end), after an idle model was unloaded, after loads and unloads
// already under way ended, or at once beside the others.
enum class RoomHow { drained, evicted, behind, beside };
inline constexpr int kRoomHows = 4;
const char* room_how_name(RoomHow how);  // "drained", "evicted", "behind", "beside"

struct Turn {
  uint64_t id = 0;
  ModelEntry* entry = nullptr;
  int waiters = 0;      // the requests that joined it, the acting one included
  bool acting = false;  // one of them is making room or loading
  std::chrono::steady_clock::time_point since;  // when its first request joined
  bool drained = false, evicted = false, behind = false;  // what making room took so far
  RoomHow how() const {
    return drained ? RoomHow::drained : evicted ? RoomHow::evicted : behind ? RoomHow::behind : RoomHow::beside;
  }
};

class Line {
 public:
  using Place = std::list<Turn>::iterator;

  // Joins `e`'s place, or makes one at the end; returns its id.
  uint64_t join(ModelEntry& e);
  // The place of this id; end() when it is gone (its model was loaded).
  Place find(uint64_t id);
  Place end() { return turns_.end(); }
  bool at_head(Place p) const { return p == turns_.begin(); }
  // Takes the place out; true if it was the head.
  bool erase(Place p);
  // 1-based place of `e`; 0: not in the line.
  int position_of(const ModelEntry& e) const;
  bool holds(const ModelEntry& e) const { return position_of(e) > 0; }
  std::vector<std::string> names() const;
  uint64_t next_ticket() { return next_ticket_++; }

 private:
  std::list<Turn> turns_;
  uint64_t next_ticket_ = 1;
};

}  // namespace reclaim
