// One request's run, from the moment its handler has it whole to its
// release: what every API's handler shares, and what the audit's serve
// scenarios drive, so that what the audit proves is what ships.
//
// A run owns the lease on its model, a cancel token linked to the lease's
// (an unload cancels the run) that its tick cancels once the client has
// gone, its place in the count of requests in flight, and its outcome,
// counted once. A handler parses its API's body into reclaim's request,
// holds the model here, runs the request with the run's hooks and token, and
// shapes the answer; the transport only says whether its client is there.
//
// Threads: a run belongs to one thread at a time (a stream's handler hands
// it to the stream's writer); the counts it shares are atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/cancel.h"
#include "core/histogram.h"
#include "engine/embed.h"
#include "engine/generate.h"
#include "engine/rerank.h"
#include "runtime/registry.h"

namespace reclaim {

// What a server counts of the requests it runs (/metrics).
struct RequestCounts {
  std::atomic<uint64_t> ok{0}, error{0}, cancelled{0}, client_gone{0};
  std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0};
  std::atomic<uint64_t> cached_prompt_tokens{0};  // of prompt_tokens, taken from the prompt cache
  // Of completions only (embeddings have no such timings): the prompt tokens
  // decoded (one count, so that it never goes down between two reads), the
  // time that took and the time spent generating, and the most tokens
  // (prompt and generated) one completion held.
  std::atomic<uint64_t> decoded_prompt_tokens{0}, prompt_us{0}, generate_us{0}, most_tokens{0};
  std::atomic<int64_t> in_flight{0};               // runs not yet released, waiting ones too
  // Each completion's time to its first token, from its start on its model
  // (the wait for the model is reclaim_queue_wait_seconds), and its rate.
  Histogram first_token_seconds{{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram tokens_per_second{{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}};
};

// How a run ended. A run released without an end failed: it counts as an
// error (what its handler answered is the API's error shape).
enum class RunEnd { none, ok, cancelled, client_gone, error };

class RequestRun {
 public:
  // In flight from here until released. `client_here` says whether the
  // client still wants the answer (the server asks the connection's socket).
  RequestRun(Registry& registry, RequestCounts& counts, std::function<bool()> client_here);
  ~RequestRun();  // release()
  RequestRun(const RequestRun&) = delete;
  RequestRun& operator=(const RequestRun&) = delete;

  // Takes `model`, waiting in its line while the client is there; `on_wait`,
  // when given, is called at each poll of the wait (a stream writes its
  // keep-alive there). Throws ClientGone, counted, when the client leaves
  // the line; and what Registry::acquire throws. `keep_alive` is the
  // request's own (Ollama's keep_alive), if it gave one.
  void hold(const std::string& model, std::optional<Millis> keep_alive, const std::function<void()>& on_wait = nullptr);
  // Takes `model` only if it is ready now; false where it would wait. Throws
  // where the line is full or the name unknown, as hold() does.
  bool hold_now(const std::string& model, std::optional<Millis> keep_alive);
  // As hold(), but gives up at `until` (false), unless it is loading the
  // model itself; a hold() after it keeps the request's place in the line.
  bool hold_until(const std::string& model, std::optional<Millis> keep_alive, std::chrono::steady_clock::time_point until,
                  const std::function<void()>& on_wait = nullptr);
  bool held() const { return static_cast<bool>(lease_); }
  Model& model() { return lease_.model(); }

  // Cancelled by the model's unload (linked once held), by tick() when the
  // client has gone, or by the handler.
  CancelToken& cancel() { return cancel_; }
  const CancelToken& cancel() const { return cancel_; }
  // Whom the run answers from now on: a run whose answer outlives its
  // connection (a resumable stream) is wanted as long as its session is.
  void set_client_here(std::function<bool()> client_here) { client_here_ = std::move(client_here); }
  // Between decode steps: cancels the run if its client has gone.
  void tick();
  // Whether the client has gone, by the transport or by a failed write
  // (client_left()).
  bool client_gone() const;

  // The end of a generation, counted with its tokens: ok, cancelled (an
  // unload, or the handler), or client_gone.
  RunEnd finish(const GenerateResult& r);
  // The end of an embedding or a ranking, counted with its prompt tokens.
  RunEnd finish(const EmbedResult& r) { return finish_pooled(r.prompt_tokens, r.cancelled); }
  RunEnd finish(const RerankResult& r) { return finish_pooled(r.prompt_tokens, r.cancelled); }
  // Ended well without a decode (a load-only request).
  void succeed() { end(RunEnd::ok); }
  // Ended in an error its handler answers.
  void fail() { end(RunEnd::error); }
  // The client has gone (a render stopped for it, a write failed): the run
  // is cancelled and counted so.
  void client_left();
  RunEnd ended() const { return end_; }

  // The lease goes, and the run is counted out of the requests in flight
  // (and as an error when it never ended). Once; the destructor calls it.
  void release() noexcept;

 private:
  void end(RunEnd e) noexcept;
  RunEnd finish_pooled(int32_t prompt_tokens, bool cancelled);

  Registry& registry_;
  RequestCounts& counts_;
  std::function<bool()> client_here_;
  WaitKept kept_;  // between its waits
  Lease lease_;
  CancelToken cancel_;
  RunEnd end_ = RunEnd::none;
  bool left_ = false;      // a write failed: the client is gone
  bool released_ = false;
};

}  // namespace reclaim
