// The raw side: the same cycles as cycles.cpp, written as a plain llama.cpp
// program would write them (no scope, no ledger, no heap release), so that
// the audit can show what reclaim changes. Only the probe is shared.
#include <llama.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "audit/cycles.h"
#include "audit/raw.h"
#include "core/error.h"
#include "engine/devices.h"

namespace reclaim::audit {

namespace {

struct AbortAt {
  float at;
  bool fired = false;
};

bool on_progress(float p, void* data) {
  auto* a = static_cast<AbortAt*>(data);
  if (p < a->at) return true;
  a->fired = true;
  return false;
}



struct Deadline {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::time_point::max();
};

bool past_deadline(void* data) { return std::chrono::steady_clock::now() >= static_cast<Deadline*>(data)->at; }

struct RawRequest {
  bool cancelled = false, in_prompt = false;
  double prompt_ms = 0;
};

// One request as a plain program writes it: its own context, batch and
// sampler, freed at the end. `plan` null: not cancelled.
RawRequest raw_request(llama_model* model, const CycleOptions& o, int threads, const CancelPlan* plan, double prompt_ms,
                       Recorder* rec) {
  RawRequest out;
  llama_context_params cp = run_context_params(o, threads);
  Deadline deadline;
  cp.abort_callback = past_deadline;
  cp.abort_callback_data = &deadline;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) throw Error("raw side: cannot create a context");
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const std::vector<llama_token> tokens = audit_prompt(vocab);
  const auto n = static_cast<int>(tokens.size());
  llama_batch batch = llama_batch_init(o.n_ctx, 0, 1);
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(chain, llama_sampler_init_greedy());
  batch.n_tokens = n;
  for (int i = 0; i < n; ++i) {
    batch.token[i] = tokens[static_cast<size_t>(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = i == n - 1;
  }
  if (plan && plan->in_prompt) {
    deadline.at = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double, std::milli>(prompt_ms * plan->delay_fraction));
  }
  const auto t0 = std::chrono::steady_clock::now();
  int rc = llama_decode(ctx, batch);
  out.prompt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (rc == 2) {
    out.cancelled = out.in_prompt = true;
  } else if (rc != 0) {
    throw Error("raw side: llama_decode failed");
  }
  if (rec) rec->sample("prompt");
  int pos = n;
  for (int i = 0; !out.cancelled && i < o.n_generate; ++i) {
    llama_token t = llama_sampler_sample(chain, ctx, -1);
    if (plan && !plan->in_prompt && i + 1 == plan->step) {
      out.cancelled = true;
      break;
    }
    batch.n_tokens = 1;
    batch.token[0] = t;
    batch.pos[0] = pos++;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = true;
    rc = llama_decode(ctx, batch);
    if (rc == 2) {
      out.cancelled = true;
    } else if (rc != 0) {
      throw Error("raw side: llama_decode failed");
    }
  }
  if (rec) rec->sample("generated");
  llama_sampler_free(chain);
  llama_batch_free(batch);
  llama_free(ctx);
  return out;
}

}  // namespace

SideResult run_raw_cycles(const CycleOptions& o) {
  SideResult out;
  start_raw_side(out);
  Recorder rec(out);
  rec.reserve(o.cycles, has_requests(o.scenario) ? o.requests : 0);
  const int threads = raw_threads(o);
  // device-idle: a plain program has no release; measured from before the
  // device's first use, what the device keeps shows in its residue.
  if (o.scenario == Scenario::device_idle) {
    out.devices = accelerator_names();
  } else if (warm_device_first(out)) {
    llama_model* model = llama_model_load_from_file(o.model.c_str(), raw_model_params(o));
    if (!model) throw Error("raw side: cannot load '" + o.model + "'");
    raw_request(model, o, threads, nullptr, 0, nullptr);
    llama_model_free(model);
  }
  rec.set_baseline(Usage::capture());

  double prompt_ms = 20;
  for (int c = 0; c < o.cycles; ++c) {
    rec.begin_cycle(c);
    llama_model_params mp = raw_model_params(o);
    AbortAt abort_at{o.scenario == Scenario::load_abort ? o.abort_at : 2.0f};
    mp.progress_callback = on_progress;
    mp.progress_callback_user_data = &abort_at;
    llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
    if (o.scenario == Scenario::load_abort) {
      if (model) throw Error("raw load-abort: the load was not aborted");
      rec.sample("aborted");
    } else {
      if (!model) throw Error("raw side: cannot load '" + o.model + "'");
      rec.loaded();
    }
    const bool one_prompt = o.scenario == Scenario::load_prompt_free || o.scenario == Scenario::device_idle;
    if (model && one_prompt) raw_request(model, o, threads, nullptr, 0, &rec);
    for (int i = 0; model && has_requests(o.scenario) && i < o.requests; ++i) {
      if (o.scenario == Scenario::generate) {
        raw_request(model, o, threads, nullptr, 0, nullptr);
      } else {
        const CancelPlan plan = plan_cancel(o, c, i);
        RawRequest r = raw_request(model, o, threads, &plan, prompt_ms, nullptr);
        rec.count_cancel(r.cancelled, r.in_prompt);
        if (!r.in_prompt) prompt_ms = r.prompt_ms;
      }
      rec.request_done();
    }
    if (model) llama_model_free(model);
    rec.end_cycle(0, 0);
  }
  return out;
}

}  // namespace reclaim::audit
