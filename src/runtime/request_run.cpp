#include "runtime/request_run.h"

namespace reclaim {

RequestRun::RequestRun(Registry& registry, RequestCounts& counts, std::function<bool()> client_here)
    : registry_(registry), counts_(counts), client_here_(std::move(client_here)) {
  ++counts_.in_flight;
}

RequestRun::~RequestRun() { release(); }

void RequestRun::hold(const std::string& model, std::optional<Millis> keep_alive, const std::function<void()>& on_wait) {
  (void)hold_until(model, keep_alive, std::chrono::steady_clock::time_point::max(), on_wait);
}

bool RequestRun::hold_until(const std::string& model, std::optional<Millis> keep_alive, std::chrono::steady_clock::time_point until,
                            const std::function<void()>& on_wait) {
  Wait w;
  w.still_wanted = [this, &on_wait] {
    if (on_wait) on_wait();
    return !client_gone();
  };
  w.give_up = until;
  w.kept = &kept_;
  try {
    lease_ = registry_.acquire(model, keep_alive, w);
  } catch (const ClientGone&) {
    end(RunEnd::client_gone);
    throw;
  }
  if (!lease_) return false;
  cancel_.link(&lease_.cancel_token());
  return true;
}

bool RequestRun::hold_now(const std::string& model, std::optional<Millis> keep_alive) {
  Wait now;
  now.no_wait = true;
  lease_ = registry_.acquire(model, keep_alive, now);
  if (!lease_) return false;
  cancel_.link(&lease_.cancel_token());
  return true;
}

bool RequestRun::client_gone() const { return left_ || (client_here_ && !client_here_()); }

void RequestRun::tick() {
  if (client_gone()) cancel_.cancel(CancelReason::client_gone);
}

void RequestRun::client_left() {
  left_ = true;
  cancel_.cancel(CancelReason::client_gone);
  end(RunEnd::client_gone);
}

RunEnd RequestRun::finish(const GenerateResult& r) {
  counts_.prompt_tokens += static_cast<uint64_t>(r.timings.prompt_tokens);
  counts_.cached_prompt_tokens += static_cast<uint64_t>(r.timings.cached_tokens);
  counts_.completion_tokens += static_cast<uint64_t>(r.timings.generated_tokens);
  counts_.decoded_prompt_tokens += static_cast<uint64_t>(r.timings.prompt_tokens - r.timings.cached_tokens);
  counts_.prompt_us += static_cast<uint64_t>(r.timings.prompt_ms * 1000);
  counts_.generate_us += static_cast<uint64_t>(r.timings.generate_ms * 1000);
  const auto held = static_cast<uint64_t>(r.timings.prompt_tokens + r.timings.generated_tokens);
  for (uint64_t most = counts_.most_tokens.load(); held > most && !counts_.most_tokens.compare_exchange_weak(most, held);) {
  }
  if (r.timings.generated_tokens > 0) counts_.first_token_seconds.observe(r.timings.first_token_ms / 1000);
  if (r.timings.generated_tokens > 1 && r.timings.generate_ms > 0) {
    counts_.tokens_per_second.observe(r.timings.generate_per_second());
  }
  if (r.finish != FinishReason::cancelled) {
    end(RunEnd::ok);
  } else {
    end(r.cancel_reason == CancelReason::client_gone ? RunEnd::client_gone : RunEnd::cancelled);
  }
  return end_;
}

RunEnd RequestRun::finish_pooled(int32_t prompt_tokens, bool cancelled) {
  if (!cancelled) {
    counts_.prompt_tokens += static_cast<uint64_t>(prompt_tokens);
    end(RunEnd::ok);
  } else {
    end(cancel_.reason() == CancelReason::client_gone ? RunEnd::client_gone : RunEnd::cancelled);
  }
  return end_;
}

void RequestRun::end(RunEnd e) noexcept {
  if (end_ != RunEnd::none) return;
  end_ = e;
  switch (e) {
    case RunEnd::ok: ++counts_.ok; break;
    case RunEnd::cancelled: ++counts_.cancelled; break;
    case RunEnd::client_gone: ++counts_.client_gone; break;
    case RunEnd::error: ++counts_.error; break;
    case RunEnd::none: break;
  }
}

void RequestRun::release() noexcept {
  if (released_) return;
  released_ = true;
  end(RunEnd::error);
  // A wait that gave up and was not taken up again is counted here.
  if (kept_.began != std::chrono::steady_clock::time_point{}) registry_.count_wait(kept_.began);
  // The token must not point at the lease's once it is gone.
  cancel_.link(nullptr);
  lease_.release();
  --counts_.in_flight;
}

}  // namespace reclaim
