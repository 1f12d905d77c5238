// The scheduler's line: the models waiting for room, first in first out.
// Requests for the same model share its place (a Turn); only the place at
// the head makes room and loads (docs/architecture.md, "Scheduling"). The
// tickets it hands out also order the requests that wait for a running slot
// on one model. Used under the registry's lock.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

namespace reclaim {

struct ModelEntry;

struct Turn {
  uint64_t id = 0;
  ModelEntry* entry = nullptr;
  int waiters = 0;      // the requests that joined it, the acting one included
  bool acting = false;  // one of them is making room or loading
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
