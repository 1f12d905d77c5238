#include "engine/owners.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <ggml-cpu.h>

#include "core/arena.h"
#include "core/heap.h"
#include "core/locked.h"
#include "core/usage.h"
#include "engine/ggml_buffers.h"
#include "engine/llama_runtime.h"

namespace reclaim {

LoadMode load_mode_from_name(const std::string& name) {
  if (name == "mmap") return LoadMode::mmap;
  if (name == "none") return LoadMode::none;
  if (name == "mlock") return LoadMode::mlock;
  if (name == "mmap-mlock") return LoadMode::mmap_mlock;
  throw Error("unknown load mode '" + name + "' (use mmap, none, mlock or mmap-mlock)");
}

const char* load_mode_name(LoadMode mode) {
  switch (mode) {
    case LoadMode::mmap: return "mmap";
    case LoadMode::none: return "none";
    case LoadMode::mlock: return "mlock";
    case LoadMode::mmap_mlock: return "mmap-mlock";
  }
  return "?";
}

void check_model_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw Error("model file '" + path + "': " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw Error("model file '" + path + "' is a directory, not a GGUF file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw Error("model file '" + path + "' cannot be opened: " + std::strerror(errno));
  char magic[4] = {};
  size_t got = std::fread(magic, 1, 4, f.get());
  if (got < 4) {
    throw InvalidModelFile("model file '" + path + "' is " + std::to_string(st.st_size) + " bytes long, too short for a GGUF header");
  }
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%02x %02x %02x %02x", static_cast<unsigned char>(magic[0]),
                  static_cast<unsigned char>(magic[1]), static_cast<unsigned char>(magic[2]),
                  static_cast<unsigned char>(magic[3]));
    throw InvalidModelFile("model file '" + path + "' is not a GGUF file (starts with bytes " + shown + ", expected 'GGUF')");
  }
}

llama_model* load_in_arena(const std::string& path, const llama_model_params& params) {
  ArenaWindow window;
  return llama_model_load_from_file(path.c_str(), params);
}

namespace {

struct ProgressState {
  const std::function<bool(float)>* fn;
  float aborted_at = -1;
};

bool on_progress(float p, void* data) {
  auto* st = static_cast<ProgressState*>(data);
  if ((*st->fn)(p)) return true;
  st->aborted_at = p;
  return false;
}

// Heap and device memory in use: what a context's buffers come from. Read
// without /proc, since it brackets every context creation.
int64_t allocated() { return static_cast<int64_t>(heap_stats().in_use) + device_memory_used(); }

}  // namespace

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

ScopedRef<llama_model> load_model(Scope& scope, const ModelLoad& load, uint64_t* bytes) {
  check_model_file(load.path);
  Scope::Slot slot = scope.reserve(Kind::model, base_name(load.path));

  llama_model_params mp = llama_model_default_params();
  switch (load.mode) {
    case LoadMode::mmap: mp.load_mode = LLAMA_LOAD_MODE_MMAP; break;
    case LoadMode::none: mp.load_mode = LLAMA_LOAD_MODE_NONE; break;
    case LoadMode::mlock: mp.load_mode = LLAMA_LOAD_MODE_MLOCK; break;
    case LoadMode::mmap_mlock: mp.load_mode = LLAMA_LOAD_MODE_MMAP_MLOCK; break;
  }
  mp.n_gpu_layers = load.n_gpu_layers;
  ProgressState progress{&load.progress};
  if (load.progress) {
    mp.progress_callback = on_progress;
    mp.progress_callback_user_data = &progress;
  }
  const bool locks = load.mode == LoadMode::mlock || load.mode == LoadMode::mmap_mlock;
  std::vector<AddressRange> locked_before;
  if (locks) locked_before = locked_ranges();
  take_llama_errors();
  // The heap the load takes (the vocab, the metadata: C malloc inside
  // llama.cpp and ggml as well as C++ new) counts in the model's bytes with
  // its tensors: measured around the load, as a context's are. Process-wide,
  // so another thread's allocations at the same time count too.
  const auto heap_before = static_cast<int64_t>(heap_stats().in_use);
  const uint64_t buffers_before = ggml_cpu_buffers_live();
  llama_model* model = load_in_arena(load.path, mp);
  const int64_t load_heap = std::max<int64_t>(0, static_cast<int64_t>(heap_stats().in_use) - heap_before);
  const uint64_t buffers_after = ggml_cpu_buffers_live();
  const uint64_t heap_tensors = buffers_after > buffers_before ? buffers_after - buffers_before : 0;
  if (!model) {
    std::string why = take_llama_errors();
    if (progress.aborted_at >= 0) {
      throw LoadAborted("load of '" + load.path + "' aborted at " +
                        std::to_string(static_cast<int>(std::lround(progress.aborted_at * 100))) + "%");
    }
    throw Error("cannot load model '" + load.path + "': " + (why.empty() ? "llama.cpp gave no reason" : why));
  }
  // What this load locked; see core/locked.h for why it is kept. Reading it
  // takes memory: without any, the model goes back at once.
  std::vector<AddressRange> model_locks;
  try {
    if (locks) model_locks = ranges_added(locked_before, locked_ranges());
  } catch (...) {
    llama_model_free(model);
    throw;
  }
  // Without mmap, the tensors the load read into host memory are in its
  // heap already: counted there, not twice. With it, the mapping keeps every
  // tensor's bytes, those copied out into the CPU's repacked or AMX layouts
  // too (llama.cpp unmaps only the file's ends that no mapped tensor uses):
  // the copies count besides.
  const uint64_t tensors = llama_model_size(model);
  const uint64_t in_heap = maps_file(load.mode) ? 0 : std::min(tensors, heap_tensors);
  const uint64_t entry_bytes = tensors - in_heap + static_cast<uint64_t>(load_heap);
  CleanupId id = slot.arm(entry_bytes, [model, model_locks = std::move(model_locks)] {
    llama_model_free(model);
    unlock_remains(model_locks);
  });
  if (bytes) *bytes = entry_bytes;
  return {model, &scope, id};
}

ScopedRef<ggml_threadpool> new_threadpool(Scope& scope, int32_t n_threads, uint32_t poll) {
  Scope::Slot slot = scope.reserve(Kind::thread, "threadpool n=" + std::to_string(n_threads));
  ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
  tpp.poll = poll;
  ggml_threadpool* pool = ggml_threadpool_new(&tpp);
  if (!pool) throw Error("cannot start a pool of " + std::to_string(n_threads) + " threads");
  CleanupId id = slot.arm(0, [pool] { ggml_threadpool_free(pool); });
  return {pool, &scope, id};
}

ScopedRef<llama_context> new_context(Scope& scope, llama_model* model, const llama_context_params& params,
                                 ggml_threadpool* pool, ContextPlacement* where,
                                 const std::function<void(llama_context*)>& prime) {
  // Worker threads created once rather than for every graph (ggml's default
  // without a pool). A context of its own pool registers it first, so that
  // the context is freed before its threads are joined.
  const int n_threads = std::max(params.n_threads, params.n_threads_batch);
  if (!pool && n_threads > 1) pool = new_threadpool(scope, n_threads).get();
  Scope::Slot slot = scope.reserve(Kind::context, "n_ctx=" + std::to_string(params.n_ctx));
  // The context's buffers come from the heap (CPU) or the device; the
  // difference around creation is what it took.
  const int64_t before = allocated();
  take_llama_errors();
  llama_context* ctx = nullptr;
  {
    // Its graph metadata and the like, given back whole when it is freed.
    ArenaWindow window;
    ctx = llama_init_from_model(model, params);
  }
  if (!ctx) {
    std::string why = take_llama_errors();
    throw Error("cannot create a context of " + std::to_string(params.n_ctx) +
                " tokens: " + (why.empty() ? "llama.cpp gave no reason" : why));
  }
  if (pool) llama_attach_threadpool(ctx, pool, pool);
  if (prime) {
    try {
      prime(ctx);
    } catch (...) {
      llama_free(ctx);
      throw;
    }
  }
  const uint64_t bytes = static_cast<uint64_t>(std::max<int64_t>(0, allocated() - before));
  // What of it is on an accelerator, by llama.cpp's own account; the rest of
  // what creation took is host memory.
  ContextPlacement placed;
  try {
    placed = placement_of(ctx);
  } catch (...) {
    llama_free(ctx);
    throw;
  }
  CleanupId id = slot.arm(bytes, [ctx] { llama_free(ctx); });
  const uint64_t device = placed.context.device_total();
  placed.entry = {bytes > device ? bytes - device : 0, placed.context.devices};
  if (device > 0) scope.place(id, placed.entry.host, placed.entry.devices);
  if (where) *where = std::move(placed);
  return {ctx, &scope, id};
}

ScopedRef<llama_batch> new_batch(Scope& scope, int32_t n_tokens, int32_t n_seq_max) {
  Scope::Slot slot = scope.reserve(Kind::batch, "n_tokens=" + std::to_string(n_tokens));
  // The holder first: made after the arrays, its failure would lose them.
  auto batch = std::make_unique<llama_batch>();
  *batch = llama_batch_init(n_tokens, 0, n_seq_max);
  if (!batch->token) throw Error("cannot allocate a batch of " + std::to_string(n_tokens) + " tokens");
  // token, pos, n_seq_id, seq_id (n_tokens+1 pointers, each to n_seq_max ids), logits
  uint64_t bytes = static_cast<uint64_t>(n_tokens) *
                   (sizeof(llama_token) + sizeof(llama_pos) + sizeof(int32_t) + sizeof(int8_t) +
                    sizeof(llama_seq_id*) + sizeof(llama_seq_id) * static_cast<uint64_t>(n_seq_max));
  llama_batch* raw = batch.release();
  CleanupId id = slot.arm(bytes, [raw] {
    llama_batch_free(*raw);
    delete raw;
  });
  return {raw, &scope, id};
}

ScopedRef<llama_sampler> new_sampler_chain(Scope& scope, std::string label) {
  Scope::Slot slot = scope.reserve(Kind::sampler, std::move(label));
  llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (!chain) throw Error("cannot create a sampler chain");
  CleanupId id = slot.arm(0, [chain] { llama_sampler_free(chain); });
  return {chain, &scope, id};
}

ScopedRef<llama_sampler> new_grammar(Scope& scope, const llama_vocab* vocab, const std::string& gbnf, bool lazy,
                                 const std::vector<std::string>& trigger_patterns,
                                 const std::vector<llama_token>& trigger_tokens) {
  // The grammar's parse tree and stacks live inside the sampler, where
  // llama.cpp tells no size; the entry is there to show it and free it.
  Scope::Slot slot = scope.reserve(Kind::sampler, lazy ? "grammar (lazy)" : "grammar");
  std::vector<const char*> patterns;
  for (const std::string& p : trigger_patterns) patterns.push_back(p.c_str());
  // llama.cpp reports a grammar it cannot parse on its log and returns null.
  llama_sampler* g = lazy ? llama_sampler_init_grammar_lazy_patterns(vocab, gbnf.c_str(), "root", patterns.data(),
                                                                     patterns.size(), trigger_tokens.data(),
                                                                     trigger_tokens.size())
                          : llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
  if (!g) throw Error("the grammar does not parse (llama.cpp's GBNF)");
  CleanupId id = slot.arm(0, [g] { llama_sampler_free(g); });
  return {g, &scope, id};
}

}  // namespace reclaim
