#include "engine/llama_runtime.h"

#include <llama.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "engine/devices.h"
#include "engine/warmup.h"

namespace reclaim {

namespace {

std::atomic<bool> g_verbose{false};
std::atomic<bool> g_started{false};

// The device-state entry of the running Runtime (note_runtime_idle).
struct DeviceState {
  std::mutex mu;
  Scope* scope = nullptr;
  CleanupId id = 0;
  int64_t at_start = 0;       // heap the device's start-up took
  bool has_reference = false;
  int64_t reference = 0;      // heap in use at the first call: nothing loaded yet
  int64_t most_beyond = 0;    // the most held beyond that with no model loaded
};
DeviceState g_device_state;
// A plain buffer, not a std::string: a thread_local with a destructor is
// registered with glibc on its thread's first use, which takes memory, and
// glibc ends the process when that fails (found by tests/fault_injection_
// test.cpp on the batch's decode thread).
constexpr size_t kErrorsMax = 4096;
thread_local char t_errors[kErrorsMax];
thread_local size_t t_errors_len = 0;
thread_local bool t_in_error = false;

void on_llama_log(ggml_log_level level, const char* text, void*) {
  // GGML_LOG_LEVEL_CONT continues the previous line at its level.
  bool is_error = level == GGML_LOG_LEVEL_ERROR || (level == GGML_LOG_LEVEL_CONT && t_in_error);
  if (level != GGML_LOG_LEVEL_CONT) t_in_error = level == GGML_LOG_LEVEL_ERROR;
  if (is_error) {
    const size_t n = std::min(std::strlen(text), kErrorsMax - 1 - t_errors_len);
    std::memcpy(t_errors + t_errors_len, text, n);
    t_errors_len += n;
  }
  // llama.cpp's debug lines (the KV cache's slots with LLAMA_KV_CACHE_DEBUG,
  // ...) only when asked for: RECLAIM_LOG=llama-debug.
  static const bool debug = log_topic_enabled("llama-debug");
  if (debug || (g_verbose.load(std::memory_order_relaxed) && level != GGML_LOG_LEVEL_DEBUG)) std::fputs(text, stderr);
}

std::vector<DeviceMemory> probe_devices() {
  std::vector<DeviceMemory> out;
  // The CPU's share of the machine's memory is already in RSS.
  for (ggml_backend_dev_t dev : accelerator_devices()) {
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(dev, &free, &total);
    out.push_back({ggml_backend_dev_name(dev), static_cast<int64_t>(total - free), static_cast<int64_t>(total)});
  }
  return out;
}

}  // namespace

// glibc keeps the stacks of joined threads in a cache (40 MiB by default) and
// reuses them for new threads. Filled, the cache holds as many stacks as it
// ever will, so worker threads that are joined again leave no mapping behind
// them (measured: +2 maps a context without this).
int warm_thread_stack_cache() {
  constexpr int kThreads = 8;  // more stacks of the default size than the cache keeps
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([] {});
  for (std::thread& t : threads) t.join();
  return kThreads;
}

namespace {

// An accelerator's driver context (CUDA's primary context, a Vulkan device)
// is made on first use and kept until exit; made here, it is in the baseline
// rather than charged to the first model as device memory that never returns.
// Returns the heap it took, which stays with the driver.
int64_t warm_accelerators() {
  const auto before = static_cast<int64_t>(heap_stats().in_use);
  for (ggml_backend_dev_t dev : accelerator_devices()) {
    if (ggml_backend_t b = ggml_backend_dev_init(dev, nullptr)) ggml_backend_free(b);
  }
  return std::max<int64_t>(0, static_cast<int64_t>(heap_stats().in_use) - before);
}

#ifdef RECLAIM_GGML_BACKEND_DL
// The prebuilt libraries carry no backend of their own: the CPU's (the
// variant for this CPU's features) and Vulkan's are dlopen'ed from their
// folder, once, and stay mapped until exit like a linked library.
void load_backends() {
  const std::string dir = backend_dir();
  ggml_backend_load_all_from_path(dir.c_str());
  if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) {
    throw Error("no ggml CPU backend could be loaded from '" + dir +
                             "' (set RECLAIM_GGML_BACKEND_DIR to the folder of libggml-cpu-*.so)");
  }
}
#endif

}  // namespace

std::string backend_dir() {
#ifdef RECLAIM_GGML_BACKEND_DL
  const char* dir = std::getenv("RECLAIM_GGML_BACKEND_DIR");
  return dir && *dir ? dir : RECLAIM_GGML_BACKEND_DIR;
#else
  return {};
#endif
}

Runtime::Runtime(RuntimeOptions options) {
  if (g_started.exchange(true)) throw std::logic_error("reclaim::Runtime started twice in one process");
  g_verbose = options.verbose;
  before_ = Usage::capture();
  llama_log_set(on_llama_log, nullptr);
#ifdef RECLAIM_GGML_BACKEND_DL
  load_backends();
#endif
  llama_backend_init();  // ggml's f16/GELU tables and the backend registry
  set_device_probe(probe_devices);
  const int64_t device_heap = warm_accelerators();
  warm_thread_stack_cache();
  warm_tokenizer_tables();
  warm_cpu_buffer_types();
  // Start-up's own garbage (registry scans, log buffers) is not the first
  // model's: give it back before the baseline.
  release_free_heap();
  after_ = Usage::capture();
  const std::string devices = accelerator_names();
  if (!devices.empty()) {
    scope_ = std::make_unique<Scope>("runtime");
    // Nothing to free: the driver's state goes with the process.
    const CleanupId id = scope_->add(Kind::device_state, devices + ": driver state and compiled shader pipelines, freed at exit",
                                     static_cast<uint64_t>(device_heap), [] {});
    std::lock_guard lock(g_device_state.mu);
    g_device_state.scope = scope_.get();
    g_device_state.id = id;
    g_device_state.at_start = device_heap;
    g_device_state.has_reference = false;
    g_device_state.most_beyond = 0;
  }
}

Runtime::~Runtime() {
  {
    std::lock_guard lock(g_device_state.mu);
    g_device_state.scope = nullptr;
  }
  scope_.reset();
  set_device_probe(nullptr);
  llama_backend_free();
  llama_log_set(nullptr, nullptr);
  g_started = false;
}

std::string Runtime::warmed() const {
  std::string names;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    if (!names.empty()) names += ", ";
    names += ggml_backend_dev_name(ggml_backend_dev_get(i));
  }
  std::string loaded;
#ifdef RECLAIM_GGML_BACKEND_DL
  loaded = "backends loaded from " + backend_dir() + ", ";
#endif
  return loaded + "llama_backend_init (ggml f16/GELU tables, backend registry: " + names +
         "), accelerator contexts, llama's unicode tables, ggml's CPU buffer types, glibc's thread-stack cache";
}

void note_runtime_idle() {
  std::lock_guard lock(g_device_state.mu);
  DeviceState& d = g_device_state;
  if (!d.scope) return;
  const auto in_use = static_cast<int64_t>(heap_stats().in_use);
  if (!d.has_reference) {
    d.has_reference = true;
    d.reference = in_use;
    return;
  }
  const int64_t beyond = in_use - d.reference;
  if (beyond <= d.most_beyond) return;
  d.most_beyond = beyond;
  d.scope->resize(d.id, static_cast<uint64_t>(d.at_start + d.most_beyond));
}

std::string take_llama_errors() {
  std::string e(t_errors, t_errors_len);
  t_errors_len = 0;
  while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
  for (char& c : e) {
    if (c == '\n') c = ';';
  }
  return e;
}

}  // namespace reclaim
