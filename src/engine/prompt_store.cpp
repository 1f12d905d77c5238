#include "engine/prompt_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>

namespace reclaim {

size_t common_prefix(const std::vector<llama_token>& a, const std::vector<llama_token>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

namespace {
struct Unmap {
  size_t size;
  void operator()(void* p) const { ::munmap(p, size); }
};
}  // namespace

PromptStore::PromptStore(Scope& scope, uint64_t cap) : scope_(scope), cap_(cap) {}

// The scope that holds the saves' cleanups closes before this is destroyed
// (it is the store's owner's); any save left is freed here all the same.
PromptStore::~PromptStore() {
  std::lock_guard lock(mu_);
  while (!saved_.empty()) free_locked(saved_.begin());
}

void PromptStore::free_locked(std::list<Saved>::iterator it) {
  if (it->state) ::munmap(it->state, it->mapped);
  bytes_ -= it->mapped;
  saved_.erase(it);
}

std::vector<CleanupId> PromptStore::make_room_locked(uint64_t cap, uint64_t more, uint64_t keep) {
  std::vector<CleanupId> drop;
  uint64_t kept = bytes_.load();
  std::vector<const Saved*> by_age;
  for (const Saved& s : saved_) {
    if (s.id != 0 && s.serial != keep) by_age.push_back(&s);  // one being armed is not droppable yet
  }
  std::sort(by_age.begin(), by_age.end(), [](const Saved* a, const Saved* b) { return a->serial < b->serial; });
  for (const Saved* s : by_age) {
    if (kept + more <= cap) break;
    drop.push_back(s->id);
    kept -= s->mapped;
  }
  return drop;
}

void PromptStore::release_all(const std::vector<CleanupId>& ids) {
  for (CleanupId id : ids) scope_.release(id);
}

bool PromptStore::save(llama_context* ctx, int32_t seq, const std::vector<llama_token>& tokens, uint64_t keep) {
  const uint64_t cap = cap_.load();
  if (cap == 0 || tokens.empty()) return false;
  const size_t size = llama_state_seq_get_size(ctx, seq);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = (size + page - 1) / page * page;
  if (size == 0 || mapped > cap) return false;
  std::vector<CleanupId> drop;
  {
    std::lock_guard lock(mu_);
    for (const Saved& s : saved_) {
      if (s.id != 0 && s.serial != keep && s.tokens == tokens) drop.push_back(s.id);
    }
  }
  release_all(drop);
  {
    std::lock_guard lock(mu_);
    drop = make_room_locked(cap, mapped, keep);
  }
  release_all(drop);
  // What is left (the save kept for its restore) may leave no room.
  if (bytes_.load() + mapped > cap) return false;
  Scope::Slot slot = scope_.reserve(Kind::prompt_cache, "saved KV cells of " + std::to_string(tokens.size()) +
                                                            " tokens (host memory)");
  void* mem = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return false;
  // Unmapped on every way out until the list holds it: llama.cpp can throw
  // out of the copy (bad_alloc before its own try; found by the fault
  // sweep's restore trials), and the list's node can fail to allocate.
  std::unique_ptr<void, Unmap> state(mem, Unmap{mapped});
  const size_t got = llama_state_seq_get_data(ctx, static_cast<uint8_t*>(state.get()), size, seq);
  if (got == 0) return false;
  Saved* p;
  {
    std::lock_guard lock(mu_);
    saved_.push_back(Saved{tokens, state.get(), got, mapped, ++serials_, 0});
    state.release();
    p = &saved_.back();
    bytes_ += mapped;
  }
  // Outside the lock: a failed arm runs the release at once.
  const CleanupId id = slot.arm(mapped, [this, p] {
    std::lock_guard lock(mu_);
    for (auto it = saved_.begin(); it != saved_.end(); ++it) {
      if (&*it == p) {
        free_locked(it);
        return;
      }
    }
  });
  std::lock_guard lock(mu_);
  p->id = id;
  return true;
}

PromptStore::Match PromptStore::best(const std::vector<llama_token>& prompt) const {
  Match m;
  std::lock_guard lock(mu_);
  for (const Saved& s : saved_) {
    if (s.id == 0) continue;
    const auto common = static_cast<int32_t>(common_prefix(s.tokens, prompt));
    if (common > m.common) m = {s.serial, common};
  }
  return m;
}

bool PromptStore::restore(llama_context* ctx, int32_t seq, const Match& m, std::vector<llama_token>& tokens) {
  CleanupId id = 0;
  bool ok = false;
  {
    std::lock_guard lock(mu_);
    for (Saved& s : saved_) {
      if (s.serial != m.save || s.id == 0) continue;
      ok = llama_state_seq_set_data(ctx, static_cast<const uint8_t*>(s.state), s.size, seq) != 0;
      if (ok) tokens = s.tokens;
      id = s.id;
      break;
    }
  }
  // Put back or refused, the save goes: the sequence holds it now, or it
  // cannot be used.
  if (id) scope_.release(id);
  if (!ok) llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
  return ok;
}

void PromptStore::set_cap(uint64_t cap) {
  cap_ = cap;
  std::vector<CleanupId> drop;
  {
    std::lock_guard lock(mu_);
    drop = make_room_locked(cap, 0);
  }
  release_all(drop);
}

// One save at a time, allocating nothing: an unload or a "drop the caches"
// must not fail for want of memory (the fault sweep's restore trials, with
// every allocation failing, left a save behind).
void PromptStore::clear() {
  for (;;) {
    CleanupId id = 0;
    {
      std::lock_guard lock(mu_);
      for (const Saved& s : saved_) {
        if (s.id != 0) {
          id = s.id;
          break;
        }
      }
    }
    if (id == 0) return;
    // False: another thread is releasing it; its cleanup takes it off the list.
    if (!scope_.release(id)) std::this_thread::yield();
  }
}

size_t PromptStore::count() const {
  std::lock_guard lock(mu_);
  return saved_.size();
}

}  // namespace reclaim
