#include "audit/cycles.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/ledger.h"
#include "core/scope.h"
#include "engine/owners.h"
#include "engine/runtime.h"

namespace reclaim::audit {

const char* const kAuditPrompt =
    "The quick brown fox jumps over the lazy dog. Memory that is taken must be given back, "
    "on every path: when a request ends, when it fails, and when the model is unloaded.";

const char* scenario_name(Scenario s) {
  switch (s) {
    case Scenario::load_free: return "load-free";
    case Scenario::load_prompt_free: return "load-prompt-free";
    case Scenario::load_abort: return "load-abort";
  }
  return "?";
}

Scenario scenario_from_name(const std::string& name) {
  for (Scenario s : kAllScenarios) {
    if (name == scenario_name(s)) return s;
  }
  throw Error("unknown scenario '" + name + "' (use load-free, load-prompt-free, load-abort or all)");
}

void Recorder::reserve(int cycles) {
  // The record is allocated before the baseline, so that the audit's own
  // bookkeeping is not counted as growth.
  out_.cycles.reserve(static_cast<size_t>(cycles));
  out_.samples.reserve(static_cast<size_t>(cycles) * 4);
}

void Recorder::set_baseline(const Usage& u) { out_.baseline = u; }

namespace {
int64_t minor_faults() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}
}  // namespace

void Recorder::begin_cycle(int cycle) {
  cycle_ = cycle;
  faults_start_ = minor_faults();
  peak_ = Usage::capture();
  cycle_start_ = peak_.t;
}

void Recorder::sample(const char* phase) {
  Usage u = Usage::capture();
  peak_ = max_of(peak_, u);
  out_.samples.push_back({u.t - out_.baseline.t, cycle_, phase, u.rss, u.anon});
}

void Recorder::end_cycle(uint64_t ledger_live, uint64_t ledger_bytes) {
  Usage after = Usage::capture();
  CycleRecord rec;
  rec.peak = max_of(peak_, after);
  rec.after = after;
  rec.seconds = after.t - cycle_start_;
  rec.minor_faults = minor_faults() - faults_start_;
  rec.ledger_live = ledger_live;
  rec.ledger_bytes = ledger_bytes;
  out_.samples.push_back({after.t - out_.baseline.t, cycle_, "released", after.rss, after.anon});
  out_.cycles.push_back(rec);
}

namespace {

int threads_for(const CycleOptions& o) {
  if (o.n_threads > 0) return o.n_threads;
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

// Prompt, then greedy tokens, through the typed owners of a request scope.
void prompt_and_generate(Scope& request, llama_model* model, const CycleOptions& o, Recorder& rec) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(o.n_ctx);
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_threads = cp.n_threads_batch = threads_for(o);
  Owned<llama_context> ctx = new_context(request, model, cp);
  const llama_vocab* vocab = llama_model_get_vocab(model);

  std::vector<llama_token> tokens(static_cast<size_t>(o.n_ctx));
  int n = llama_tokenize(vocab, kAuditPrompt, static_cast<int32_t>(std::strlen(kAuditPrompt)), tokens.data(),
                         static_cast<int32_t>(tokens.size()), true, true);
  if (n < 0 || n + o.n_generate > o.n_ctx) throw Error("audit prompt does not fit a context of " + std::to_string(o.n_ctx));
  tokens.resize(static_cast<size_t>(n));

  Owned<llama_batch> batch = new_batch(request, o.n_ctx, 1);
  Owned<llama_sampler> chain = new_sampler_chain(request, "greedy");
  llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());

  llama_batch& b = *batch.get();
  b.n_tokens = 0;
  for (int i = 0; i < n; ++i) {
    b.token[i] = tokens[static_cast<size_t>(i)];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = i == n - 1;
    b.n_tokens++;
  }
  if (llama_decode(ctx.get(), b) != 0) throw Error("llama_decode failed on the audit prompt");
  rec.sample("prompt");
  int pos = n;
  for (int i = 0; i < o.n_generate; ++i) {
    llama_token t = llama_sampler_sample(chain.get(), ctx.get(), -1);
    b.n_tokens = 1;
    b.token[0] = t;
    b.pos[0] = pos++;
    b.n_seq_id[0] = 1;
    b.seq_id[0][0] = 0;
    b.logits[0] = true;
    if (llama_decode(ctx.get(), b) != 0) throw Error("llama_decode failed while generating");
  }
  rec.sample("generated");
}

void leak_on_purpose(const std::string& what) {
  if (what.empty()) return;
  if (what == "heap") {
    // Touched, so that it is resident, and never freed.
    char* p = new char[2 << 20];
    std::memset(p, 1, 2 << 20);
    asm volatile("" : : "r"(p) : "memory");
  } else if (what == "fd") {
    (void)::open("/dev/null", O_RDONLY);
  } else if (what == "ledger") {
    Ledger::process().acquire(Kind::buffer, "test-leak", "leaked on purpose", 4096);
  } else {
    throw Error("unknown test leak '" + what + "' (use heap, fd or ledger)");
  }
}

}  // namespace

SideResult run_reclaim_cycles(const CycleOptions& o) {
  SideResult out;
  out.side = "reclaim";
  Runtime runtime;
  out.start_before = runtime.before();
  out.warmed = runtime.warmed();
  Recorder rec(out);
  rec.reserve(o.cycles);
  rec.set_baseline(Usage::capture());
  const LoadMode mode = load_mode_from_name(o.load_mode);

  for (int c = 0; c < o.cycles; ++c) {
    rec.begin_cycle(c);
    {
      Scope model_scope("model:audit", ScopeOptions{.release_heap_on_close = true});
      ModelLoad load;
      load.path = o.model;
      load.mode = mode;
      if (o.scenario == Scenario::load_abort) {
        load.progress = [&](float p) { return p < o.abort_at; };
      } else {
        load.progress = [&](float) { return true; };
      }
      try {
        Owned<llama_model> model = load_model(model_scope, load);
        rec.sample("loaded");
        if (o.scenario == Scenario::load_prompt_free) {
          Scope request(model_scope, "request:" + std::to_string(c), ScopeOptions{.release_heap_on_close = true});
          prompt_and_generate(request, model.get(), o, rec);
        }
        if (o.scenario == Scenario::load_abort) throw Error("load-abort: the load was not aborted");
      } catch (const LoadAborted&) {
        if (o.scenario != Scenario::load_abort) throw;
        rec.sample("aborted");
      }
      for (const std::string& e : model_scope.errors()) out.errors.push_back(e);
    }
    leak_on_purpose(o.test_leak);
    LedgerTotals t = Ledger::process().totals();
    rec.end_cycle(t.count, t.bytes);
  }
  out.failed_releases = Ledger::process().failed_releases();
  return out;
}

}  // namespace reclaim::audit
