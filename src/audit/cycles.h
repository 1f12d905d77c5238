// One side of an audit: load/use/free cycles of one scenario, measured with
// the Usage probe at every phase. The reclaim side (cycles.cpp) goes through
// scopes and typed owners; the raw side (raw_cycles.cpp) makes the same
// llama.cpp calls by hand, as a program without reclaim would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <llama.h>
#include <nlohmann/json.hpp>

#include "core/usage.h"

namespace reclaim::audit {

// The first five are `reclaim run`'s path (Model, Session, generate):
// generate: load, `requests` requests (each its own session), unload.
// cancel: the same, each request cancelled at a random decode step or while
// its prompt is being decoded.
// The serve-* ones are `reclaim serve`'s path (Registry, Batcher; audit/
// serve_plan.h says what each asks for).
// serve-draft: serve-vanish's waves on a model with a draft model (--draft,
// default: the model itself, which guesses right), a third of the later
// requests cancelled and a third losing their clients.
// serve-vision: the same waves on a model with its image projector
// (--mmproj), each request's prompt an image and the audit's prompt; raw
// llama.cpp decodes them with mtmd's own helpers. Not in "all": it needs a
// projector.
// device-idle: load, prompt and free on the accelerator, then its runtime
// state is released (engine/device_life.h); measured against the process
// before the device's first use, with no warm-up. Not in "all": it needs an
// accelerator.
enum class Scenario {
  load_free, load_prompt_free, load_abort, generate, cancel, device_idle,
  serve, serve_cancel, serve_vanish, serve_swap, serve_drain, serve_unload_cancel, serve_chat, serve_embed, serve_draft,
  serve_vision
};
const char* scenario_name(Scenario s);
Scenario scenario_from_name(const std::string& name);  // throws Error
inline constexpr Scenario kAllScenarios[] = {
    Scenario::load_free,    Scenario::load_prompt_free, Scenario::load_abort, Scenario::generate,
    Scenario::cancel,       Scenario::serve,            Scenario::serve_cancel, Scenario::serve_vanish,
    Scenario::serve_swap,   Scenario::serve_drain,      Scenario::serve_unload_cancel, Scenario::serve_chat,
    Scenario::serve_embed,  Scenario::serve_draft};
inline constexpr Scenario kDeviceScenarios[] = {Scenario::device_idle};
// Those that need a file besides the model (not in "all").
inline constexpr Scenario kProjectorScenarios[] = {Scenario::serve_vision};
bool has_requests(Scenario s);
bool is_serve(Scenario s);  // through the Registry and the Batcher

struct CycleOptions {
  std::string model;
  Scenario scenario = Scenario::load_free;
  int cycles = 3;
  std::string load_mode = "mmap";
  int n_ctx = 256;
  int n_generate = 16;
  int n_threads = 0;        // 0: all cores
  float abort_at = 0.5f;    // load-abort: fraction of the load at which to stop
  int requests = 8;         // generate, cancel: requests per cycle
  uint32_t seed = 1;        // cancel: where the requests are cancelled
  int parallel = 2;         // serve-*: sequences of the model's batch
  int gpu_layers = -1;      // layers on the accelerator (-1: all, where there is one)
  std::string draft;        // serve-draft: the draft model (empty: the model itself)
  std::string mmproj;       // serve-vision: the model's image projector
  std::string test_leak;    // test-only: "heap", "fd" or "ledger" leaks on purpose each cycle
};
inline const std::string& draft_of(const CycleOptions& o) { return o.draft.empty() ? o.model : o.draft; }
nlohmann::json to_json(const CycleOptions& o);
CycleOptions cycle_options_from_json(const nlohmann::json& j);

struct Sample {
  double t = 0;  // seconds since the baseline
  int cycle = 0;
  std::string phase;
  int64_t rss = 0, anon = 0;
};

struct CycleRecord {
  Usage peak;    // field-wise maximum over the cycle's samples
  Usage after;   // after everything of the cycle was released
  Usage loaded;  // after the load, before any request
  std::vector<Usage> requests;  // after each request, the model still loaded
  int cancelled_in_prompt = 0, cancelled_in_generation = 0, not_cancelled = 0;
  double seconds = 0;
  int64_t minor_faults = 0;  // page faults taken during the cycle (getrusage)
  uint64_t ledger_live = 0;  // ledger entries left after the cycle
  uint64_t ledger_bytes = 0;
};

struct SideResult {
  std::string side;  // "reclaim" or "raw"
  Usage start_before;
  Usage baseline;
  std::string warmed;
  std::vector<CycleRecord> cycles;
  std::vector<Sample> samples;
  uint64_t failed_releases = 0;
  std::vector<std::string> errors;
  // Where the model's context lives on between requests (the batch's, on the
  // serve path), the first requests make what the next ones reuse (the KV
  // pages they touched): request residues are counted from them.
  bool requests_from_first = false;
  // The model is on an accelerator (`devices`, by name): one cycle ran before
  // the baseline, from `device_warm_before` (warm_device_first).
  std::string devices;
  Usage device_warm_before;
};
nlohmann::json to_json(const SideResult& r);
SideResult side_result_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Usage& u);
Usage usage_from_json(const nlohmann::json& j);

// Collects samples and the peak of the cycle under way.
class Recorder {
 public:
  explicit Recorder(SideResult& out) : out_(out) {}
  // Everything the records need is allocated here, before the baseline, so
  // that the audit's own bookkeeping does not show as growth.
  void reserve(int cycles, int requests);
  void set_baseline(const Usage& u);
  void begin_cycle(int cycle);
  void sample(const char* phase);
  void loaded();
  void request_done();
  // Where a cancel-scenario request ended.
  void count_cancel(bool cancelled, bool in_prompt);
  void end_cycle(uint64_t ledger_live, uint64_t ledger_bytes);

 private:
  SideResult& out_;
  std::vector<std::vector<Usage>> request_store_;  // one reserved list a cycle
  CycleRecord current_;
  Usage peak_;
  int cycle_ = 0;
  double cycle_start_ = 0;
  int64_t faults_start_ = 0;
};

// The prompt decoded by the request scenarios, the same on both sides.
extern const char* const kAuditPrompt;
// That prompt as token ids for `vocab`: tokenized, or, for a model with no
// tokenizer (llama.cpp's no_vocab, as its architecture test models are), a
// fixed run of ids as long as the text is in the bpe test vocabulary.
std::vector<llama_token> audit_prompt(const llama_vocab* vocab);

// Where the cancel scenario cancels one request; both sides draw the same.
struct CancelPlan {
  bool in_prompt = false;  // a deadline while the prompt is decoded...
  double delay_fraction = 0;  // ...this far into the prompt's expected time
  int step = 1;            // else: before this generation step (1..n_generate-1)
};
CancelPlan plan_cancel(const CycleOptions& o, int cycle, int request);

// Test-only leaks that prove the checks can fail (CycleOptions::test_leak):
// "request-heap" leaks in every request, with the model loaded; "heap", "fd"
// and "ledger" once a cycle. Throws Error for another name.
void leak_on_purpose(const std::string& what, bool in_request);

// Whether the cycles run where there is an accelerator: with its layers on
// it, or with none (--gpu-layers 0), since llama.cpp then still runs a large
// batch's matrix products there (its op offload). If so, notes it in
// `out` with the usage now, and the caller runs one cycle before the
// baseline: an accelerator's backend compiles each shader pipeline the first
// time a graph needs it and keeps it (and the driver's threads) until the
// process exits, so the first cycle's residue is one-time state, not a leak.
// Both sides warm the same way; the report shows what it took.
bool warm_device_first(SideResult& out);

SideResult run_reclaim_cycles(const CycleOptions& o);
SideResult run_raw_cycles(const CycleOptions& o);
// The serve-* scenarios (serve_cycles.cpp, raw_serve_cycles.cpp).
SideResult run_reclaim_serve_cycles(const CycleOptions& o);
SideResult run_raw_serve_cycles(const CycleOptions& o);

}  // namespace reclaim::audit
