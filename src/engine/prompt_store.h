// Sequences' KV cells saved to host memory when their sequence is taken by
// another conversation, and put back when that conversation returns
// (llama-server's --cache-ram). The cells kept in the sequences cost nothing
// beyond the context (engine/prompt_cache.h); these saves are memory of
// their own: each is an entry of kind prompt_cache under the model's
// "cache" scope, with its bytes, within a cap that the registry sets from
// the memory budget, and dropped first when a model needs room.
//
// Thread-safe: the decode thread saves and restores; the registry sets the
// cap and drops saves from its own thread.
#pragma once

#include <llama.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <vector>

#include "core/scope.h"

namespace reclaim {

class PromptStore {
 public:
  PromptStore(Scope& scope, uint64_t cap);
  ~PromptStore();
  PromptStore(const PromptStore&) = delete;
  PromptStore& operator=(const PromptStore&) = delete;

  struct Match {
    uint64_t save = 0;   // its serial; 0: none
    int32_t common = 0;  // tokens it shares with the prompt
  };

  // Saves the cells of `seq`, which hold `tokens`, dropping the least
  // recently used saves to fit the cap, but never `keep` (a save about to be
  // put back); false if it cannot fit or llama.cpp gives no state. A save of
  // the same tokens is replaced.
  bool save(llama_context* ctx, int32_t seq, const std::vector<llama_token>& tokens, uint64_t keep = 0);
  Match best(const std::vector<llama_token>& prompt) const;
  // Puts `m`'s cells into the empty sequence `seq` and forgets the save
  // (the sequence holds it now); its tokens go to `tokens`. False, with the
  // sequence empty, if the save is gone or llama.cpp refused it.
  bool restore(llama_context* ctx, int32_t seq, const Match& m, std::vector<llama_token>& tokens);

  // A new cap; saves above it go now.
  void set_cap(uint64_t cap);
  void clear();
  uint64_t bytes() const { return bytes_.load(); }
  size_t count() const;

 private:
  struct Saved {
    std::vector<llama_token> tokens;
    void* state = nullptr;  // mapped for itself: unmapped, it is the OS's again
    size_t size = 0, mapped = 0;
    uint64_t serial = 0;  // a save's name for Match: unlike its address, never reused
    CleanupId id = 0;
  };
  void free_locked(std::list<Saved>::iterator it);
  // Drops least recently used saves (the oldest serials) but `keep` until
  // `more` bytes fit `cap`; returns the cleanups to release once the lock is
  // dropped.
  std::vector<CleanupId> make_room_locked(uint64_t cap, uint64_t more, uint64_t keep = 0);
  void release_all(const std::vector<CleanupId>& ids);

  Scope& scope_;
  mutable std::mutex mu_;
  std::list<Saved> saved_;  // stable addresses: a cleanup finds its save by them
  std::atomic<uint64_t> cap_, bytes_{0};
  uint64_t serials_ = 0;
};

// How many tokens `a` and `b` begin with alike.
size_t common_prefix(const std::vector<llama_token>& a, const std::vector<llama_token>& b);

}  // namespace reclaim
