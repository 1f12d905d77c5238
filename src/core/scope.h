// A Scope owns cleanups and child scopes, as an nginx pool or an APR pool
// does: closing it closes its live children (newest first), then runs its own
// cleanups newest first. It closes on destruction, on exception unwinding, or
// on an explicit close(), once. Every cleanup is also an entry on the ledger,
// so a resource that a scope owns is always visible, and one whose scope is
// gone cannot stay hidden.
//
// Acquire in three steps so that nothing exists without a registered release:
//   auto slot = scope.reserve(Kind::model, "qwen.gguf");  // may throw; nothing held yet
//   llama_model* m = llama_model_load_from_file(...);       // acquire
//   slot.arm(bytes, [m] { llama_model_free(m); });          // releases m if it throws
//
// Threads: every member is safe to call concurrently, but a child scope object
// must not be destroyed while its parent is closing it; whoever shares a scope
// across threads (the runtime's leases) keeps it alive until both are done.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "core/resource.h"

namespace reclaim {

class Ledger;

struct ScopeOptions {
  // Give freed heap back to the OS after the close (see core/heap.h). For
  // scopes that free much at once: a model, a context.
  bool release_heap_on_close = false;
};

// Names one cleanup inside its scope, for running it early or dropping it.
using CleanupId = uint64_t;

class Scope {
 public:
  class Slot;

  explicit Scope(std::string name, ScopeOptions options = {}, Ledger* ledger = nullptr);
  Scope(Scope& parent, std::string name, ScopeOptions options = {});
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // Registers a release for a resource already held. Throws if the scope is
  // closed; the caller then still owns the resource, so prefer reserve().
  CleanupId add(Kind kind, std::string label, uint64_t bytes, std::function<void()> release);

  // Reserves the record before the resource exists (nginx's order): if the
  // reservation throws, nothing was acquired; once armed, the release cannot
  // be lost. A slot dropped without arm() leaves nothing behind.
  Slot reserve(Kind kind, std::string label);

  // Runs one cleanup now (e.g. a model unloaded before its scope ends), so the
  // close cannot run it twice. Returns false if it is not (or no longer) here.
  bool release(CleanupId id);
  // Drops a cleanup without running it: ownership moved elsewhere.
  bool forget(CleanupId id);
  void resize(CleanupId id, uint64_t bytes);
  // Ledger::place for the entry of `id`.
  void place(CleanupId id, uint64_t host, std::vector<DeviceBytes> devices);

  void close() noexcept;
  bool closed() const;

  const std::string& name() const { return name_; }
  // Owner path on the ledger: parent path, '/', name.
  const std::string& path() const { return path_; }
  size_t live_cleanups() const;
  size_t live_children() const;
  // Messages of cleanups that threw; the other cleanups still ran.
  std::vector<std::string> errors() const;

 private:
  struct Cleanup {
    CleanupId id = 0;
    uint64_t ledger_id = 0;
    Kind kind = Kind::other;
    std::string label;
    std::function<void()> release;
    bool armed = false;
  };

  void run(Cleanup& c) noexcept;
  // `ancestor_releases_heap`: a scope closing us gives the heap back after
  // all its children, so we need not do it too.
  void close_impl(bool ancestor_releases_heap) noexcept;
  void adopt(Scope* child);
  void disown(Scope* child);
  void check_open_locked() const;
  // The ledger entry of an armed cleanup, or 0.
  uint64_t ledger_id_of(CleanupId id) const;

  std::string name_;
  std::string path_;
  ScopeOptions options_;
  Ledger* ledger_;
  Scope* parent_ = nullptr;

  mutable std::mutex mu_;
  std::list<Cleanup> cleanups_;  // stable addresses: a Slot points into it
  std::vector<Scope*> children_;
  std::vector<std::string> errors_;
  CleanupId next_id_ = 1;
  bool reserved_ = false;  // anything was ever acquired here
  bool closing_ = false;
  bool closed_ = false;
};

class [[nodiscard]] Scope::Slot {
 public:
  Slot(Slot&& other) noexcept;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  Slot& operator=(Slot&&) = delete;
  ~Slot();

  // Hands the release to the scope and puts the resource on the ledger. If
  // either cannot be recorded (memory exhausted: the release's own storage,
  // or the ledger's entry), `release` runs at once and the error is
  // rethrown: a resource never exists unrecorded. The callable is taken as
  // it is and copied into a std::function here, not at the call, where a
  // failed copy would lose it (tests/fault_injection_test.cpp found a model
  // lost that way).
  template <class F>
  CleanupId arm(uint64_t bytes, F release) {
    std::function<void()> fn;
    try {
      fn = release;  // a copy: `release` stays whole, to run if this fails
    } catch (...) {
      release();
      throw;  // the destructor drops the reserved record
    }
    return arm_function(bytes, std::move(fn));
  }

 private:
  friend class Scope;
  CleanupId arm_function(uint64_t bytes, std::function<void()> release);
  Slot(Scope* scope, std::list<Cleanup>::iterator it) : scope_(scope), it_(it) {}
  Scope* scope_;
  std::list<Cleanup>::iterator it_;
};

}  // namespace reclaim
