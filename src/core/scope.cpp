#include "core/scope.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <utility>

#include "core/heap.h"
#include "core/ledger.h"

namespace reclaim {

namespace {
std::string join_path(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "/" + name;
}
}  // namespace

Scope::Scope(std::string name, ScopeOptions options, Ledger* ledger)
    : name_(std::move(name)), path_(name_), options_(options), ledger_(ledger ? ledger : &Ledger::process()) {}

Scope::Scope(Scope& parent, std::string name, ScopeOptions options)
    : name_(std::move(name)), path_(join_path(parent.path_, name_)), options_(options), ledger_(parent.ledger_) {
  parent.adopt(this);
  parent_ = &parent;
}

Scope::~Scope() {
  close();
  // close() has already detached us from the parent.
}

void Scope::check_open_locked() const {
  if (closing_ || closed_) throw std::logic_error("scope '" + path_ + "' is closed; cannot take a new resource");
}

void Scope::adopt(Scope* child) {
  std::lock_guard lock(mu_);
  check_open_locked();
  children_.push_back(child);
}

void Scope::disown(Scope* child) {
  std::lock_guard lock(mu_);
  auto it = std::find(children_.begin(), children_.end(), child);
  if (it != children_.end()) children_.erase(it);
}

CleanupId Scope::add(Kind kind, std::string label, uint64_t bytes, std::function<void()> release) {
  Slot slot = reserve(kind, std::move(label));
  return slot.arm(bytes, std::move(release));
}

Scope::Slot Scope::reserve(Kind kind, std::string label) {
  std::lock_guard lock(mu_);
  check_open_locked();
  Cleanup c;
  c.id = next_id_++;
  c.kind = kind;
  c.label = std::move(label);
  cleanups_.push_back(std::move(c));
  reserved_ = true;
  return Slot(this, std::prev(cleanups_.end()));
}

Scope::Slot::Slot(Slot&& other) noexcept : scope_(std::exchange(other.scope_, nullptr)), it_(other.it_) {}

Scope::Slot::~Slot() {
  if (!scope_) return;
  std::lock_guard lock(scope_->mu_);
  scope_->cleanups_.erase(it_);
}

CleanupId Scope::Slot::arm_function(uint64_t bytes, std::function<void()> release) {
  Scope* s = std::exchange(scope_, nullptr);
  if (!s) throw std::logic_error("Scope::Slot armed twice");
  // The ledger insert is the one step here that can fail (bad_alloc); then the
  // resource is released at once and the error goes on, so that no resource
  // exists unrecorded and no caller holds a pointer to one already freed.
  uint64_t ledger_id;
  try {
    ledger_id = s->ledger_->acquire(it_->kind, s->path_, it_->label, bytes);
  } catch (...) {
    {
      std::lock_guard lock(s->mu_);
      s->cleanups_.erase(it_);
    }
    release();
    throw;
  }
  std::lock_guard lock(s->mu_);
  it_->ledger_id = ledger_id;
  it_->release = std::move(release);
  it_->armed = true;
  return it_->id;
}

void Scope::run(Cleanup& c) noexcept {
  bool failed = false;
  try {
    if (c.release) c.release();
  } catch (const std::exception& e) {
    failed = true;
    std::string msg = std::string(kind_name(c.kind)) + " '" + c.label + "' in " + path_ + ": " + e.what();
    std::fprintf(stderr, "reclaim: release failed: %s\n", msg.c_str());
    std::lock_guard lock(mu_);
    errors_.push_back(std::move(msg));
  } catch (...) {
    failed = true;
    std::string msg = std::string(kind_name(c.kind)) + " '" + c.label + "' in " + path_ + ": unknown exception";
    std::fprintf(stderr, "reclaim: release failed: %s\n", msg.c_str());
    std::lock_guard lock(mu_);
    errors_.push_back(std::move(msg));
  }
  ledger_->release(c.ledger_id, failed);
}

bool Scope::release(CleanupId id) {
  Cleanup c;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(cleanups_.begin(), cleanups_.end(), [&](const Cleanup& x) { return x.id == id && x.armed; });
    if (it == cleanups_.end()) return false;
    c = std::move(*it);
    cleanups_.erase(it);
  }
  run(c);
  return true;
}

bool Scope::forget(CleanupId id) {
  uint64_t ledger_id;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(cleanups_.begin(), cleanups_.end(), [&](const Cleanup& x) { return x.id == id && x.armed; });
    if (it == cleanups_.end()) return false;
    ledger_id = it->ledger_id;
    cleanups_.erase(it);
  }
  ledger_->release(ledger_id);
  return true;
}

uint64_t Scope::ledger_id_of(CleanupId id) const {
  std::lock_guard lock(mu_);
  for (const Cleanup& c : cleanups_) {
    if (c.id == id && c.armed) return c.ledger_id;
  }
  return 0;
}

void Scope::resize(CleanupId id, uint64_t bytes) {
  if (const uint64_t ledger_id = ledger_id_of(id)) ledger_->resize(ledger_id, bytes);
}

void Scope::place(CleanupId id, uint64_t host, std::vector<DeviceBytes> devices) {
  if (const uint64_t ledger_id = ledger_id_of(id)) ledger_->place(ledger_id, host, std::move(devices));
}

void Scope::close() noexcept { close_impl(false); }

// One malloc_trim per close, by the outermost scope that asked for it: the
// trim walks the whole heap, so one after all the frees does what one after
// each closed child would.
void Scope::close_impl(bool ancestor_releases_heap) noexcept {
  const bool release_heap = options_.release_heap_on_close && !ancestor_releases_heap;
  {
    std::lock_guard lock(mu_);
    if (closing_ || closed_) return;
    closing_ = true;
  }
  // Children first, newest first. Each is popped under the lock and closed
  // outside it, since a child's cleanups may take other locks.
  bool closed_child = false;
  for (;;) {
    Scope* child = nullptr;
    {
      std::lock_guard lock(mu_);
      if (children_.empty()) break;
      child = children_.back();
      children_.pop_back();
    }
    {
      std::lock_guard child_lock(child->mu_);
      child->parent_ = nullptr;  // already disowned: its close must not call back
    }
    child->close_impl(ancestor_releases_heap || release_heap);
    closed_child = true;
  }
  for (;;) {
    Cleanup c;
    {
      std::lock_guard lock(mu_);
      // Unarmed slots belong to an acquisition in progress on another
      // thread; they are skipped and their Slot erases them.
      auto it = std::find_if(cleanups_.rbegin(), cleanups_.rend(), [](const Cleanup& x) { return x.armed; });
      if (it == cleanups_.rend()) break;
      c = std::move(*it);
      cleanups_.erase(std::next(it).base());
    }
    run(c);
  }
  bool reserved;
  {
    std::lock_guard lock(mu_);
    reserved = reserved_;
  }
  // Also after a failed or aborted acquisition: llama.cpp freed what it had
  // taken, but the freed heap is still resident until it is trimmed.
  if ((reserved || closed_child) && release_heap) release_free_heap();
  Scope* parent;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    parent = std::exchange(parent_, nullptr);
  }
  if (parent) parent->disown(this);
}

bool Scope::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

size_t Scope::live_cleanups() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(std::count_if(cleanups_.begin(), cleanups_.end(), [](const Cleanup& c) { return c.armed; }));
}

size_t Scope::live_children() const {
  std::lock_guard lock(mu_);
  return children_.size();
}

std::vector<std::string> Scope::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

}  // namespace reclaim
