// The reclaim side of the serve-* scenarios: `reclaim serve`'s own path. A
// Registry as serve_command.cpp makes it (a vetter, --parallel sequences a
// model, one running slot a sequence), requests on the server's WorkerPool,
// each acquiring a lease (the first loads the model on demand) and decoding
// on the model's Batcher with the server's hooks: a cancel token linked to
// the lease's, a tick that notices a client gone, a Wait that leaves the line.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "audit/serve_plan.h"
#include "audit/reclaim_side.h"
#include "core/error.h"
#include "core/ledger.h"
#include "engine/batcher.h"
#include "engine/embed.h"
#include "engine/llama_runtime.h"
#include "runtime/registry.h"
#include "runtime/request_run.h"
#include "server/worker_pool.h"

namespace reclaim::audit {

namespace {

constexpr Millis kUnloadTimeout = std::chrono::minutes(2);

RegistryOptions serve_options(const CycleOptions& o, std::shared_ptr<Vetter> vetter) {
  RegistryOptions r;
  r.keep_alive = Millis(-1);  // each cycle unloads, as its plan says
  r.device_idle = Millis(-1);  // the device stays up, warmed: device-idle is a scenario of its own
  r.load_mode = load_mode_from_name(o.load_mode);
  r.n_threads = o.n_threads;
  r.n_gpu_layers = o.gpu_layers;
  r.parallel = std::max(1, o.parallel);
  r.max_running = r.parallel;
  r.max_queue = std::max(o.requests, 1);
  r.drain_timeout = kUnloadTimeout;
  r.session.n_ctx = o.n_ctx;
  r.session.n_batch = kServeStepTokens;
  r.session.n_threads = o.n_threads;
  r.cache_ram = 64 << 20;  // serve-chat saves conversations there
  r.vetter = std::move(vetter);
  return r;
}

// serve-swap's budget holds one of its two models: their estimate and a half.
int64_t budget_for_one(const CycleOptions& o, const RegistryOptions& base) {
  Registry probe(base, {{"a", o.model}});
  probe.load("a");
  const int64_t estimate = probe.status("a").estimate;
  if (estimate <= 0) throw Error("serve-swap: no estimate for '" + o.model + "'");
  return estimate + estimate / 2;
}

struct Outcome {
  bool gone_waiting = false, cancelled = false, in_prompt = false;
  double prompt_ms = 0;
};

// One request in the run the server's handlers use (runtime/request_run.h).
// Its client is the plan's: one that vanishes leaves the line if it has to
// wait, or else goes after its first text.
Outcome serve_one(Registry& registry, RequestCounts& counts, const CycleOptions& o, const ServeRequest& plan,
                  double prompt_ms) {
  Outcome out;
  const bool vanish = plan.end == RequestEnd::vanish;
  int generated = 0;  // tokens so far
  bool holding = false;
  RequestRun run(registry, counts, [&] { return !vanish || (holding && generated == 0); });
  try {
    run.hold(serve_model_name(plan.model), std::nullopt);
  } catch (const ClientGone&) {
    out.gone_waiting = true;
    return out;
  }
  holding = true;
  if (o.scenario == Scenario::serve_embed) {
    const EmbedResult e = embed(run.model(), {request_prompt(run.model().vocab(), plan)}, &run.cancel(), [&run] { run.tick(); });
    run.finish(e);
    if (e.vectors.size() != 1) throw Error("serve-embed: the request gave no vector");
    leak_on_purpose(o.test_leak, true);
    return out;
  }
  CancelToken& cancel = run.cancel();
  GenerateHooks hooks;
  if (plan.end == RequestEnd::cancel && plan.plan.in_prompt) {
    const auto delay = std::chrono::duration<double, std::milli>(prompt_ms * plan.plan.delay_fraction);
    cancel.set_deadline(CancelToken::Clock::now() + std::chrono::duration_cast<CancelToken::Clock::duration>(delay));
  }
  hooks.on_tokens = [&](int32_t n) {
    generated = n;
    if (plan.end == RequestEnd::cancel && !plan.plan.in_prompt && generated >= plan.plan.step) cancel.cancel();
  };
  hooks.tick = [&run] { run.tick(); };
  GenerateRequest req = greedy_request(o, run.model().vocab());
  req.prompt_tokens = request_prompt(run.model().vocab(), plan);
  if (plan.image >= 0) {
    req.prompt_tokens.clear();
    req.prompt = vision_prompt_text();
    req.images = {audit_image(plan.image)};
  }
  GenerateResult r = run.model().batcher()->generate(req, hooks, &cancel);
  run.finish(r);
  out.cancelled = r.finish == FinishReason::cancelled;
  out.in_prompt = out.cancelled && r.tokens.empty();
  out.prompt_ms = r.timings.prompt_ms;
  leak_on_purpose(o.test_leak, true);
  return out;
}

// A wave's requests, arriving together on the server's worker threads.
class Wave {
 public:
  Wave(server::WorkerPool& pool, Registry& registry, RequestCounts& counts, const CycleOptions& o,
       const std::vector<ServeRequest>& plan, double prompt_ms)
      : outcomes_(plan.size()) {
    left_ = plan.size();
    for (size_t i = 0; i < plan.size(); ++i) {
      pool.enqueue([this, &registry, &counts, &o, &plan, i, prompt_ms] {
        Outcome out;
        std::exception_ptr error;
        try {
          out = serve_one(registry, counts, o, plan[i], prompt_ms);
        } catch (...) {
          error = std::current_exception();
        }
        std::lock_guard lock(mu_);
        outcomes_[i] = out;
        if (error && !error_) error_ = error;
        if (--left_ == 0) cv_.notify_all();
      });
    }
  }
  // Its jobs point into it: it outlives them, whatever the cycle throws.
  ~Wave() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return left_ == 0; });
  }
  Wave(const Wave&) = delete;
  Wave& operator=(const Wave&) = delete;
  // Rethrows the first request's error.
  const std::vector<Outcome>& wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return left_ == 0; });
    if (error_) std::rethrow_exception(error_);
    return outcomes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_ = 0;
  std::vector<Outcome> outcomes_;
  std::exception_ptr error_;
};

// Until every one of the wave's requests runs on the model (or the wave ended).
void wait_until_running(Registry& registry, size_t n, Millis bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < end) {
    const ModelStatus s = registry.status(serve_model_name(0));
    if (s.in_flight >= static_cast<int>(n) || (s.state == ModelState::loaded && s.in_flight == 0 && s.queued == 0)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  throw Error("the wave's requests did not start within " + std::to_string(bound.count()) + " ms");
}

// One cycle of the plan; `rec` null: a cycle before the baseline.
void run_cycle(Registry& registry, server::WorkerPool& pool, RequestCounts& counts, const CycleOptions& o,
               const ServeCycle& plan, double& prompt_ms, Recorder* rec) {
  for (size_t w = 0; w < plan.waves.size(); ++w) {
    const bool unload_now = w + 1 == plan.waves.size() && plan.end != CycleEnd::unload;
    Wave wave(pool, registry, counts, o, plan.waves[w], prompt_ms);
    if (unload_now) {
      wait_until_running(registry, plan.waves[w].size(), kUnloadTimeout);
      if (rec) rec->loaded();
      registry.unload(serve_model_name(0), plan.end == CycleEnd::drain ? UnloadMode::drain : UnloadMode::cancel,
                      kUnloadTimeout);
    }
    const bool counted = o.scenario == Scenario::serve_cancel || o.scenario == Scenario::serve_vanish ||
                         o.scenario == Scenario::serve_draft || o.scenario == Scenario::serve_vision ||
                         plan.end == CycleEnd::cancel_unload;
    for (const Outcome& r : wave.wait()) {
      if (rec && r.gone_waiting) rec->count_cancel(true, true);
      if (rec && !r.gone_waiting && counted) rec->count_cancel(r.cancelled, r.in_prompt);
      if (!r.gone_waiting && !r.cancelled && r.prompt_ms > 0) prompt_ms = r.prompt_ms;
    }
    // The threads that started for the wave are gone before a measurement.
    if (!pool.wait_settled(kUnloadTimeout)) throw Error("the worker threads did not settle after a wave");
    if (unload_now || !rec) continue;
    if (w == 0) rec->loaded();  // the first wave loaded the model on demand
    // serve-chat's saves are the cache doing its work, and grow with the
    // conversations up to --cache-ram: a wave's figures are taken once they
    // are dropped, as room pressure drops them, so that what the wave left
    // beyond them shows, and that dropping gives back every byte.
    if (o.scenario == Scenario::serve_chat && !registry.drop_prompt_cache_saves()) {
      throw Error("serve-chat: the wave saved no conversation to host memory; the scenario does not test the store");
    }
    rec->request_done();
  }
  registry.unload_all(UnloadMode::drain, kUnloadTimeout);
  leak_on_purpose(o.test_leak, false);
}

}  // namespace

SideResult run_reclaim_serve_cycles(const CycleOptions& o) {
  SideResult out;
  Runtime runtime;
  start_reclaim_side(out, runtime);
  out.requests_from_first = true;
  // What serve has before its first request: the vetter, the registry and the
  // HTTP threads that stay.
  VetterOptions vo;
  vo.program = Vetter::this_program();
  RegistryOptions ro = serve_options(o, std::make_shared<Vetter>(std::move(vo)));
  if (o.scenario == Scenario::serve_swap) ro.memory_budget = budget_for_one(o, ro);
  std::vector<ModelSpec> specs = {{"a", o.model}, {"b", o.model}};
  if (o.scenario == Scenario::serve_vision) {
    if (o.mmproj.empty()) throw Error("serve-vision needs the model's projector (--mmproj)");
    specs[0].settings.mmproj = o.mmproj;
  }
  if (o.scenario == Scenario::serve_draft) {
    specs[0].settings.draft = draft_of(o);
    ro.speculation.draft_max = 4;  // the raw side's guess
  }
  Registry registry(ro, specs);
  Scope http("http");
  server::WorkerPool pool(http, 4, 512);
  RequestCounts counts;  // the server's, which /metrics reads
  Recorder rec(out);
  size_t most_waves = 0;
  for (int c = 0; c < o.cycles; ++c) most_waves = std::max(most_waves, plan_serve_cycle(o, c).waves.size());
  rec.reserve(o.cycles, static_cast<int>(most_waves));
  double prompt_ms = 20;  // until a request has measured it
  if (warm_device_first(out)) {
    for (const ServeCycle& plan : serve_warmup_cycles(o)) run_cycle(registry, pool, counts, o, plan, prompt_ms, nullptr);
  }
  const LedgerTotals at_start = Ledger::process().totals();
  rec.set_baseline(Usage::capture());

  for (int c = 0; c < o.cycles; ++c) {
    rec.begin_cycle(c);
    run_cycle(registry, pool, counts, o, plan_serve_cycle(o, c), prompt_ms, &rec);
    for (const ModelStatus& m : registry.list()) {
      if (!m.last_error.empty()) out.errors.push_back(m.name + ": " + m.last_error);
    }
    const LedgerTotals t = Ledger::process().totals();
    rec.end_cycle(t.count - std::min(t.count, at_start.count), t.bytes - std::min(t.bytes, at_start.bytes));
  }
  out.failed_releases = Ledger::process().failed_releases();
  return out;
}

}  // namespace reclaim::audit
