#include "engine/llama_runtime.h"

#include <llama.h>
#include <mtmd-helper.h>

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
#include "engine/device_life.h"
#include "engine/devices.h"
#include "engine/warmup.h"

namespace reclaim {

namespace {

std::atomic<bool> g_verbose{false};
std::atomic<bool> g_started{false};

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

Runtime::Runtime(RuntimeOptions options) {
  if (g_started.exchange(true)) throw std::logic_error("reclaim::Runtime started twice in one process");
  g_verbose = options.verbose;
  before_ = Usage::capture();
  llama_log_set(on_llama_log, nullptr);
  mtmd_helper_log_set(on_llama_log, nullptr);  // image projectors' and decoders' errors too, on the same list
  llama_backend_init();  // ggml's f16/GELU tables and the backend registry
  set_device_probe(probe_device_memory);
  if (!accelerator_names().empty()) {
    // The device's driver state, made now, is in the baseline rather than
    // charged to the first model, and is an entry of its own.
    scope_ = std::make_unique<Scope>("runtime");
    start_devices(*scope_);
  }
  warm_thread_stack_cache();
  warm_tokenizer_tables();
  warm_cpu_buffer_types();
  // Start-up's own garbage (registry scans, log buffers) is not the first
  // model's: give it back before the baseline.
  release_free_heap();
  after_ = Usage::capture();
}

Runtime::~Runtime() {
  stop_devices();
  scope_.reset();  // the device's state, if it is still up
  set_device_probe(nullptr);
  llama_backend_free();
  llama_log_set(nullptr, nullptr);
  mtmd_helper_log_set(nullptr, nullptr);
  g_started = false;
}

std::string Runtime::warmed() const {
  std::string names;
  for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    if (!names.empty()) names += ", ";
    names += ggml_backend_dev_name(ggml_backend_dev_get(i));
  }
  return "llama_backend_init (ggml f16/GELU tables, backend registry: " + names +
         "), accelerator contexts, llama's unicode tables, ggml's CPU buffer types, glibc's thread-stack cache";
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
