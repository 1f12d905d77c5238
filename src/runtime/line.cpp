#include "runtime/line.h"

#include <algorithm>

#include "runtime/model_entry.h"

namespace reclaim {

const char* room_how_name(RoomHow how) {
  switch (how) {
    case RoomHow::drained: return "drained";
    case RoomHow::evicted: return "evicted";
    case RoomHow::behind: return "behind";
    case RoomHow::beside: return "beside";
  }
  return "beside";
}

uint64_t Line::join(ModelEntry& e) {
  auto it = std::find_if(turns_.begin(), turns_.end(), [&](const Turn& t) { return t.entry == &e; });
  if (it == turns_.end()) {
    Turn t;
    t.id = next_ticket();
    t.entry = &e;
    t.since = std::chrono::steady_clock::now();
    it = turns_.insert(turns_.end(), t);
  }
  ++it->waiters;
  return it->id;
}

Line::Place Line::find(uint64_t id) {
  return std::find_if(turns_.begin(), turns_.end(), [&](const Turn& t) { return t.id == id; });
}

bool Line::erase(Place p) {
  const bool head = p == turns_.begin();
  turns_.erase(p);
  return head;
}

int Line::position_of(const ModelEntry& e) const {
  int place = 0;
  for (const Turn& t : turns_) {
    ++place;
    if (t.entry == &e) return place;
  }
  return 0;
}

std::vector<std::string> Line::names() const {
  std::vector<std::string> out;
  for (const Turn& t : turns_) out.push_back(t.entry->spec.name);
  return out;
}

}  // namespace reclaim
