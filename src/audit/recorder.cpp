// What both sides of an audit share: scenario names, the cancel plan, the
// Recorder that measures each phase, and the test-only leaks.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "audit/cycles.h"
#include "core/error.h"
#include "core/ledger.h"

namespace reclaim::audit {

const char* const kAuditPrompt =
    "The quick brown fox jumps over the lazy dog. Memory that is taken must be given back, "
    "on every path: when a request ends, when it fails, and when the model is unloaded.";

std::vector<llama_token> audit_prompt(const llama_vocab* vocab) {
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  if (llama_vocab_type(vocab) == LLAMA_VOCAB_TYPE_NONE) {
    // Spread over the vocabulary, none repeated next to another.
    std::vector<llama_token> ids(36);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<llama_token>((i * 37 + 11) % static_cast<size_t>(n_vocab));
    return ids;
  }
  const auto len = static_cast<int32_t>(std::strlen(kAuditPrompt));
  std::vector<llama_token> tokens(static_cast<size_t>(len) + 4);
  const int32_t n = llama_tokenize(vocab, kAuditPrompt, len, tokens.data(), static_cast<int32_t>(tokens.size()), true, true);
  if (n <= 0) throw Error("cannot tokenize the audit's prompt");
  tokens.resize(static_cast<size_t>(n));
  return tokens;
}

const char* scenario_name(Scenario s) {
  switch (s) {
    case Scenario::load_free: return "load-free";
    case Scenario::load_prompt_free: return "load-prompt-free";
    case Scenario::load_abort: return "load-abort";
    case Scenario::generate: return "generate";
    case Scenario::cancel: return "cancel";
    case Scenario::device_idle: return "device-idle";
    case Scenario::serve: return "serve";
    case Scenario::serve_cancel: return "serve-cancel";
    case Scenario::serve_vanish: return "serve-vanish";
    case Scenario::serve_swap: return "serve-swap";
    case Scenario::serve_drain: return "serve-drain";
    case Scenario::serve_unload_cancel: return "serve-unload-cancel";
    case Scenario::serve_chat: return "serve-chat";
    case Scenario::serve_embed: return "serve-embed";
    case Scenario::serve_draft: return "serve-draft";
    case Scenario::serve_vision: return "serve-vision";
  }
  return "?";
}

Scenario scenario_from_name(const std::string& name) {
  for (Scenario s : kAllScenarios) {
    if (name == scenario_name(s)) return s;
  }
  for (Scenario s : kDeviceScenarios) {
    if (name == scenario_name(s)) return s;
  }
  for (Scenario s : kProjectorScenarios) {
    if (name == scenario_name(s)) return s;
  }
  std::string names;
  for (Scenario s : kAllScenarios) names += std::string(scenario_name(s)) + ", ";
  for (Scenario s : kDeviceScenarios) names += std::string(scenario_name(s)) + ", ";
  for (Scenario s : kProjectorScenarios) names += std::string(scenario_name(s)) + ", ";
  throw Error("unknown scenario '" + name + "' (use " + names + "or all)");
}

bool is_serve(Scenario s) { return s >= Scenario::serve; }

bool has_requests(Scenario s) { return s == Scenario::generate || s == Scenario::cancel || is_serve(s); }

CancelPlan plan_cancel(const CycleOptions& o, int cycle, int request) {
  std::mt19937 rng(o.seed * 1000003u + static_cast<uint32_t>(cycle) * 1009u + static_cast<uint32_t>(request));
  CancelPlan p;
  // Every other request is cancelled in its prompt; the first one is not, so
  // that its prompt time is known for the others' deadlines.
  p.in_prompt = request % 2 == 1;
  p.delay_fraction = std::uniform_real_distribution<double>(0.0, 0.9)(rng);
  p.step = std::uniform_int_distribution<int>(1, std::max(1, o.n_generate - 1))(rng);
  return p;
}

void leak_on_purpose(const std::string& what, bool in_request) {
  if (what.empty() || in_request != (what == "request-heap")) return;
  if (what == "request-heap") {
    char* p = new char[256 << 10];
    std::memset(p, 1, 256 << 10);
    asm volatile("" : : "r"(p) : "memory");
  } else if (what == "heap") {
    // Touched, so that it is resident, and never freed.
    char* p = new char[2 << 20];
    std::memset(p, 1, 2 << 20);
    asm volatile("" : : "r"(p) : "memory");
  } else if (what == "fd") {
    (void)::open("/dev/null", O_RDONLY);
  } else if (what == "ledger") {
    Ledger::process().acquire(Kind::buffer, "test-leak", "leaked on purpose", 4096);
  } else {
    throw Error("unknown test leak '" + what + "' (use heap, request-heap, fd or ledger)");
  }
}

void Recorder::reserve(int cycles, int requests) {
  out_.cycles.reserve(static_cast<size_t>(cycles));
  out_.samples.reserve(static_cast<size_t>(cycles) * (5 + static_cast<size_t>(requests)));
  request_store_.resize(static_cast<size_t>(cycles));
  for (std::vector<Usage>& r : request_store_) r.reserve(static_cast<size_t>(requests));
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
  current_ = CycleRecord{};
  if (static_cast<size_t>(cycle) < request_store_.size()) current_.requests = std::move(request_store_[static_cast<size_t>(cycle)]);
}

void Recorder::sample(const char* phase) {
  Usage u = Usage::capture();
  peak_ = max_of(peak_, u);
  out_.samples.push_back({u.t - out_.baseline.t, cycle_, phase, u.rss, u.anon});
}

void Recorder::loaded() {
  current_.loaded = Usage::capture();
  peak_ = max_of(peak_, current_.loaded);
  out_.samples.push_back({current_.loaded.t - out_.baseline.t, cycle_, "loaded", current_.loaded.rss, current_.loaded.anon});
}

void Recorder::request_done() {
  Usage u = Usage::capture();
  peak_ = max_of(peak_, u);
  out_.samples.push_back({u.t - out_.baseline.t, cycle_, "request", u.rss, u.anon});
  current_.requests.push_back(std::move(u));
}

void Recorder::count_cancel(bool cancelled, bool in_prompt) {
  if (!cancelled) {
    ++current_.not_cancelled;
  } else if (in_prompt) {
    ++current_.cancelled_in_prompt;
  } else {
    ++current_.cancelled_in_generation;
  }
}

void Recorder::end_cycle(uint64_t ledger_live, uint64_t ledger_bytes) {
  Usage after = Usage::capture();
  current_.peak = max_of(peak_, after);
  current_.after = after;
  current_.seconds = after.t - cycle_start_;
  current_.minor_faults = minor_faults() - faults_start_;
  current_.ledger_live = ledger_live;
  current_.ledger_bytes = ledger_bytes;
  out_.samples.push_back({after.t - out_.baseline.t, cycle_, "released", after.rss, after.anon});
  out_.cycles.push_back(std::move(current_));
}

}  // namespace reclaim::audit
