// The prompt cache of a batch, kept the way llama-server's slots keep
// theirs: when a request ends well, its KV cells stay in its sequence, and a
// later request is given the free sequence whose cells share the longest
// prefix of tokens with its prompt, and decodes only the rest. A chat's next
// turn repeats the whole conversation so far, so it decodes only the new
// message instead of the history.
//
// Its bytes: the cells are in the context's KV buffer, allocated (and, on
// the CPU, cleared and so touched) with the context, so keeping them costs no
// memory beyond the context's own, and dropping them would give none back.
// The ledger shows them as an entry of kind prompt_cache under
// "model:<name>/cache", with the share of the KV buffer they fill moved out
// of the context's entry: the cache is visible and the totals do not change.
//
// A sequence taken by another conversation is saved to host memory first
// (engine/prompt_store.h), and put back into a free sequence when its
// conversation returns.
//
// Not thread-safe, but for its store and its counts: only the Batcher's
// decode thread calls it, and other threads read tokens() and cells(),
// which it publishes after each change.
#pragma once

#include <llama.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/scope.h"
#include "engine/placement.h"
#include "engine/prompt_store.h"

namespace reclaim {

class PromptCache {
 public:
  // `context_entry` is the context's cleanup in `context_scope`; `where`
  // what new_context said of it.
  // `store_cap`: bytes the saves in host memory may take (0: none).
  PromptCache(Scope& model_scope, Scope& context_scope, CleanupId context_entry, const ContextPlacement& where,
              int32_t n_seq, uint32_t n_cells, uint64_t store_cap);
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  // The free sequence for a prompt: the one whose cells share the longest
  // prefix with it, if that is at least a tenth of the prompt (llama-server's
  // slot similarity); else an empty one, else the least recently used. A
  // save in the store that shares more is put back into the empty or least
  // recently used one. `reuse` false: no prefix is wanted ("cache_prompt":
  // false). Returns the sequence and how many tokens the prompt shares with
  // what it will hold.
  struct Pick {
    int32_t seq = -1;
    int32_t common = 0;
    PromptStore::Match saved;  // to put back first
  };
  template <class Busy>
  Pick pick(const std::vector<llama_token>& prompt, bool reuse, Busy busy) const;

  // A request of `prompt` took `p.seq`: its cells are the request's now.
  // Cells it would lose, most of another conversation's, are saved first; a
  // save picked is put back. It keeps the prefix the cells share with the
  // prompt (`reuse`), all but the prompt's last token, whose logits give the
  // first one; the rest are removed. Returns how many it kept, which is fewer
  // where the memory cannot cut a sequence there (a recurrent state, a
  // sliding window that dropped the start).
  int32_t take(llama_context* ctx, const Pick& p, const std::vector<llama_token>& prompt, bool reuse, int32_t n_swa);
  // The request in `seq` ended well; the first `n_past` positions of its
  // cells hold `prompt` then `generated`. Kept for the next request; false
  // (nothing kept) where n_past does not fit them.
  bool keep(int32_t seq, const std::vector<llama_token>& prompt, const std::vector<llama_token>& generated,
            int32_t n_past);
  // The request in `seq` ended otherwise: its cells go.
  void drop(llama_context* ctx, int32_t seq);

  // Any thread.
  size_t tokens(int32_t seq) const { return published_[static_cast<size_t>(seq)].load(); }
  uint64_t cells() const { return cells_.load(); }  // over every sequence
  PromptStore& store() { return store_; }

 private:
  struct Seq {
    std::vector<llama_token> tokens;  // those whose cells are in the sequence
    uint64_t used = 0;                // when it was last kept, by clock_
  };
  void account();

  std::vector<Seq> seqs_;
  std::unique_ptr<std::atomic<size_t>[]> published_;  // each one's tokens.size()
  std::atomic<uint64_t> cells_{0};
  uint64_t clock_ = 0;
  Scope& context_scope_;
  CleanupId context_entry_;
  Placement context_;  // the context's entry before any of it was moved
  Placement kv_;       // the KV buffer by place
  uint32_t n_cells_;
  // Before the scope, so that it outlives the cleanups of its saves there.
  PromptStore store_;
  Scope scope_;  // "cache", under the model's
  CleanupId entry_ = 0;
};

template <class Busy>
PromptCache::Pick PromptCache::pick(const std::vector<llama_token>& prompt, bool reuse, Busy busy) const {
  Pick best, empty, lru;
  const PromptStore::Match saved = reuse ? store_.best(prompt) : PromptStore::Match{};
  uint64_t lru_used = UINT64_MAX;
  for (size_t s = 0; s < seqs_.size(); ++s) {
    if (busy(s)) continue;
    const Seq& q = seqs_[s];
    if (q.tokens.empty()) {
      if (empty.seq < 0) empty.seq = static_cast<int32_t>(s);
      continue;
    }
    if (q.used < lru_used) {
      lru_used = q.used;
      lru.seq = static_cast<int32_t>(s);
    }
    if (!reuse) continue;
    const auto common = static_cast<int32_t>(common_prefix(q.tokens, prompt));
    if (common > best.common) best = {static_cast<int32_t>(s), common};
  }
  const bool worth = std::max(best.common, saved.common) * 10 >= static_cast<int32_t>(prompt.size());
  if (worth && saved.common > best.common && (empty.seq >= 0 || lru.seq >= 0)) {
    Pick p = empty.seq >= 0 ? empty : lru;
    p.common = saved.common;
    p.saved = saved;
    return p;
  }
  if (best.seq >= 0 && worth) return best;
  return empty.seq >= 0 ? empty : lru;
}

}  // namespace reclaim
