#include "server/router_events.h"

namespace reclaim::server {

void EventRing::publish(nlohmann::json event) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
    if (events_.size() > kKept) {
      events_.pop_front();
      ++first_;
    }
  }
  cv_.notify_all();
}

std::vector<nlohmann::json> EventRing::read(uint64_t& next, std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, wait, [&] { return first_ + events_.size() > next; });
  if (next < first_) next = first_;  // fell behind: the oldest are gone
  std::vector<nlohmann::json> out(events_.begin() + static_cast<std::ptrdiff_t>(next - first_), events_.end());
  next = first_ + events_.size();
  return out;
}

uint64_t EventRing::end() const {
  std::lock_guard lock(mu_);
  return first_ + events_.size();
}

}  // namespace reclaim::server
