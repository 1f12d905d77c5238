#include "engine/prompt_cache.h"

#include <algorithm>

#include "engine/image_prompt.h"

namespace reclaim {

PromptCache::PromptCache(Scope& model_scope, Scope& context_scope, CleanupId context_entry,
                         const ContextPlacement& where, int32_t n_seq, uint32_t n_cells, uint64_t store_cap)
    : seqs_(static_cast<size_t>(n_seq)), published_(std::make_unique<std::atomic<size_t>[]>(static_cast<size_t>(n_seq))),
      context_scope_(context_scope), context_entry_(context_entry),
      context_(where.entry), kv_(where.kv), n_cells_(n_cells), store_(scope_, store_cap), scope_(model_scope, "cache") {
  // Its bytes are the context's: the context's own cleanup frees them, after
  // this scope has closed (it is the model's newest child).
  entry_ = scope_.add(Kind::prompt_cache, "KV cells kept for the next request (in the context's buffer)", 0, [] {});
}

int32_t PromptCache::take(llama_context* ctx, const Pick& p, const std::vector<llama_token>& prompt, bool reuse,
                          int32_t n_swa) {
  const int32_t seq = p.seq;
  Seq& q = seqs_[static_cast<size_t>(seq)];
  llama_memory_t mem = llama_get_memory(ctx);
  auto shared = [&] {
    const auto common = static_cast<int32_t>(common_prefix(q.tokens, prompt));
    return reuse ? image_start_before(prompt, std::min(common, static_cast<int32_t>(prompt.size()) - 1)) : 0;
  };
  // Most of another conversation would be lost here: kept in the store, for
  // when it comes back (llama-server saves a slot it is about to lose half
  // of the same way). Neither the save nor the restore is needed for the
  // request: one that fails (no memory, the model unloading) only means a
  // later miss.
  try {
    if (!q.tokens.empty() && (p.saved.save || static_cast<size_t>(shared()) * 2 < q.tokens.size())) {
      (void)store_.save(ctx, seq, q.tokens, p.saved.save);
    }
  } catch (...) {
  }
  if (p.saved.save) {
    llama_memory_seq_rm(mem, seq, -1, -1);
    q.tokens.clear();
    try {
      std::vector<llama_token> restored;
      if (store_.restore(ctx, seq, p.saved, restored)) q.tokens = std::move(restored);
    } catch (...) {
      llama_memory_seq_rm(mem, seq, -1, -1);
    }
  }
  int32_t n_keep = shared();
  if (n_keep > 0) {
    // The next position needs the cells of the window before it (all of
    // them without a sliding window): a sliding window forgot the start of
    // a long sequence, and a recurrent state is one cell, at its last
    // position, so it serves only a prompt that extends all of it
    // (llama-server's pos_min check).
    const llama_pos pos_min = llama_memory_seq_pos_min(mem, seq);
    const int32_t needed = std::max(0, n_keep - n_swa);
    if (pos_min < 0 || pos_min > needed) n_keep = 0;
  }
  // A recurrent state cannot be cut in the middle: seq_rm says so.
  if (n_keep > 0 && !llama_memory_seq_rm(mem, seq, n_keep, -1)) n_keep = 0;
  if (n_keep == 0) llama_memory_seq_rm(mem, seq, -1, -1);
  q.tokens.clear();
  q.used = 0;
  account();
  return n_keep;
}

bool PromptCache::keep(int32_t seq, const std::vector<llama_token>& prompt, const std::vector<llama_token>& generated,
                       int32_t n_past) {
  Seq& q = seqs_[static_cast<size_t>(seq)];
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  // The last token sampled is never decoded: n_past counts those that were.
  if (n_past < n_prompt || static_cast<size_t>(n_past - n_prompt) > generated.size()) return false;
  q.tokens.clear();
  q.tokens.reserve(static_cast<size_t>(n_past));
  q.tokens.insert(q.tokens.end(), prompt.begin(), prompt.end());
  q.tokens.insert(q.tokens.end(), generated.begin(), generated.begin() + (n_past - n_prompt));
  q.used = ++clock_;
  account();
  return true;
}

void PromptCache::drop(llama_context* ctx, int32_t seq) {
  llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
  Seq& q = seqs_[static_cast<size_t>(seq)];
  q.tokens.clear();
  q.used = 0;
  account();
}

namespace {

// `kv`'s share for `cells` of `n_cells`, at most what the entry holds there.
uint64_t share(uint64_t kv, uint64_t cells, uint32_t n_cells, uint64_t at_most) {
  if (n_cells == 0) return 0;
  const auto b = static_cast<uint64_t>(static_cast<unsigned __int128>(kv) * cells / n_cells);
  return std::min(b, at_most);
}

}  // namespace

void PromptCache::account() {
  uint64_t n = 0;
  for (size_t s = 0; s < seqs_.size(); ++s) {
    published_[s] = seqs_[s].tokens.size();
    n += seqs_[s].tokens.size();
  }
  cells_ = n;
  Placement held, rest = context_;
  held.host = share(kv_.host, n, n_cells_, context_.host);
  rest.host -= held.host;
  for (DeviceBytes& d : rest.devices) {
    for (const DeviceBytes& k : kv_.devices) {
      if (k.device != d.device) continue;
      const uint64_t b = share(k.bytes, n, n_cells_, d.bytes);
      if (b > 0) held.devices.push_back({d.device, b});
      d.bytes -= b;
    }
  }
  context_scope_.place(context_entry_, rest.host, rest.devices);
  scope_.place(entry_, held.host, held.devices);
}

}  // namespace reclaim
