// The reclaim side of an audit: the product's own path (Model, Session,
// generate), measured at every phase.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "audit/cycles.h"
#include "audit/reclaim_side.h"
#include "core/error.h"
#include "core/ledger.h"
#include "engine/device_life.h"
#include "engine/devices.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/llama_runtime.h"

namespace reclaim::audit {

namespace {

SessionOptions session_options(const CycleOptions& o) {
  SessionOptions so;
  so.n_ctx = o.n_ctx;
  so.n_batch = o.n_ctx;  // the prompt in one decode, as the raw side does it
  so.n_threads = o.n_threads;
  return so;
}

void one_request(Model& model, const CycleOptions& o, Recorder& rec, bool sample_phases) {
  Session session(model, session_options(o));
  GenerateHooks hooks;
  if (sample_phases) {
    hooks.before_decode = [&](int step, bool prompt) {
      if (!prompt && step == 1) rec.sample("prompt");
    };
  }
  generate(session, greedy_request(o, model.vocab()), hooks);
  if (sample_phases) rec.sample("generated");
}

// Returns the prompt's decode time when the prompt was not cancelled, else the
// previous estimate.
double cancelled_request(Model& model, const CycleOptions& o, const CancelPlan& plan, double prompt_ms,
                         Recorder& rec) {
  CancelToken cancel;
  Session session(model, session_options(o), &cancel);
  GenerateHooks hooks;
  hooks.before_decode = [&](int step, bool prompt) {
    if (prompt && step == 0 && plan.in_prompt) {
      // A deadline inside the prompt's decode: only llama.cpp's abort
      // callback, polled between graph nodes, can stop it there.
      const auto delay = std::chrono::duration<double, std::milli>(prompt_ms * plan.delay_fraction);
      cancel.set_deadline(CancelToken::Clock::now() + std::chrono::duration_cast<CancelToken::Clock::duration>(delay));
    }
    if (!prompt && !plan.in_prompt && step == plan.step) cancel.cancel();
  };
  GenerateResult r = generate(session, greedy_request(o, model.vocab()), hooks);
  const bool cancelled = r.finish == FinishReason::cancelled;
  rec.count_cancel(cancelled, cancelled && r.tokens.empty());
  return cancelled && r.tokens.empty() ? prompt_ms : r.timings.prompt_ms;
}

void release_devices_or_throw() {
  release_idle_devices(std::chrono::milliseconds(0));
  const DeviceState state = device_life().state;
  if (state != DeviceState::released) {
    throw Error("device-idle: the device's state was not released (" + std::string(device_state_name(state)) +
                "; a backend without ggml_backend_release?)");
  }
}

}  // namespace

SideResult run_reclaim_cycles(const CycleOptions& o) {
  SideResult out;
  Runtime runtime;
  start_reclaim_side(out, runtime);
  Recorder rec(out);
  rec.reserve(o.cycles, has_requests(o.scenario) ? o.requests : 0);
  ModelLoad load;
  load.path = o.model;
  load.mode = load_mode_from_name(o.load_mode);
  load.n_threads = o.n_threads;
  load.n_gpu_layers = o.gpu_layers;
  load.progress = [](float) { return true; };
  const bool device_idle = o.scenario == Scenario::device_idle;
  if (device_idle) {
    // No warm-up: what the device's first use takes is what the release
    // has to give back. The device starts released, as a server's does
    // when nothing uses it.
    out.devices = accelerator_names();
    if (out.devices.empty()) throw Error("device-idle needs an accelerator, and there is none here");
    release_devices_or_throw();
  } else if (warm_device_first(out)) {
    Model model(load);
    Session session(model, session_options(o));
    generate(session, greedy_request(o, model.vocab()));
  }
  if (o.scenario == Scenario::load_abort) load.progress = [&](float p) { return p < o.abort_at; };
  // An accelerator's runtime state is on the ledger from start-up to exit.
  const LedgerTotals at_start = Ledger::process().totals();
  rec.set_baseline(Usage::capture());

  double prompt_ms = 20;  // until the first request has measured it
  for (int c = 0; c < o.cycles; ++c) {
    rec.begin_cycle(c);
    try {
      Model model(load);
      rec.loaded();
      if (o.scenario == Scenario::load_abort) throw Error("load-abort: the load was not aborted");
      if (o.scenario == Scenario::load_prompt_free || device_idle) one_request(model, o, rec, true);
      for (int i = 0; has_requests(o.scenario) && i < o.requests; ++i) {
        if (o.scenario == Scenario::generate) {
          one_request(model, o, rec, false);
        } else {
          prompt_ms = cancelled_request(model, o, plan_cancel(o, c, i), prompt_ms, rec);
        }
        leak_on_purpose(o.test_leak, true);
        rec.request_done();
      }
      model.unload();
      for (const std::string& e : model.scope().errors()) out.errors.push_back(e);
      if (device_idle) release_devices_or_throw();
    } catch (const LoadAborted&) {
      if (o.scenario != Scenario::load_abort) throw;
      rec.sample("aborted");
    }
    leak_on_purpose(o.test_leak, false);
    const LedgerTotals t = Ledger::process().totals();
    rec.end_cycle(t.count - std::min(t.count, at_start.count), t.bytes - std::min(t.bytes, at_start.bytes));
  }
  out.failed_releases = Ledger::process().failed_releases();
  return out;
}

}  // namespace reclaim::audit
