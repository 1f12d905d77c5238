#include "server/stream_sessions.h"

#include <algorithm>

namespace reclaim::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

StreamSession::StreamSession(std::string id, Scope& scope)
    : id_(std::move(id)),
      started_at_(unix_now()),
      scope_(scope),
      // The bytes are the session's own, freed with it: the entry only
      // shows them (the scope closing first has nothing to free).
      entry_(scope.add(Kind::buffer, "resumable stream '" + id_ + "'", 0, [] {})) {}

StreamSession::~StreamSession() { scope_.release(entry_); }

void StreamSession::append(std::string_view data) {
  if (data.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    if (bytes_.size() + data.size() > StreamSessions::kMaxBytes) {
      // Past the most kept: the oldest bytes go down to kKeptBytes, so that
      // the rest moves once a megabyte rather than at every chunk.
      const size_t drop = bytes_.size() + data.size() - StreamSessions::kKeptBytes;
      const size_t from_kept = std::min(drop, bytes_.size());
      bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(from_kept));
      data.remove_prefix(drop - from_kept);
      dropped_ += drop;
    }
    // Grown by doubling up to kMaxBytes and no further (a vector's reserve
    // takes what it is asked, where a string's doubles at least).
    if (bytes_.size() + data.size() > bytes_.capacity()) {
      bytes_.reserve(std::min(StreamSessions::kMaxBytes, std::max(bytes_.size() + data.size(), 2 * bytes_.capacity())));
    }
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    account_locked();
  }
  cv_.notify_all();
}

void StreamSession::account_locked() {
  const size_t heap = bytes_.capacity();
  if (heap == accounted_) return;
  scope_.resize(entry_, heap);
  accounted_ = heap;
}

void StreamSession::finish() {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    finished_at_ = unix_now();
  }
  cv_.notify_all();
}

void StreamSession::cancel() {
  cancelled_ = true;
  cv_.notify_all();
}

StreamSession::Read StreamSession::read(size_t& offset, std::string& out, std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, wait, [&] { return done_ || offset < dropped_ + bytes_.size(); });
  if (offset < dropped_) return Read::lost;
  const size_t end = dropped_ + bytes_.size();
  if (offset < end) {
    out.append(bytes_.data() + (offset - dropped_), end - offset);
    offset = end;
  }
  return done_ ? Read::done : Read::more;
}

bool StreamSession::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

bool StreamSession::started() const {
  std::lock_guard lock(mu_);
  return done_ || dropped_ + bytes_.size() > 0;
}

size_t StreamSession::total() const {
  std::lock_guard lock(mu_);
  return dropped_ + bytes_.size();
}

size_t StreamSession::kept() const {
  std::lock_guard lock(mu_);
  return bytes_.size();
}

size_t StreamSession::first_kept() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

int64_t StreamSession::finished_at() const {
  std::lock_guard lock(mu_);
  return finished_at_;
}

StreamSessions::StreamSessions(Scope& scope) : scope_(scope) {
  expiry_.start(scope, "stream sessions' expiry", [this] { expire(); }, [this] {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  });
}

StreamSessions::~StreamSessions() { expiry_.stop(); }

void StreamSessions::expire() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    sweep_locked();
    int64_t next = 0;  // the first finished one's expiry, unix seconds
    for (const auto& [id, s] : sessions_) {
      const int64_t at = s->finished_at();
      if (at != 0 && (next == 0 || at < next)) next = at;
    }
    if (next == 0) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, std::chrono::system_clock::time_point(std::chrono::seconds(next + kTtl.count())));
    }
  }
}

void StreamSessions::finish(StreamSession& s) {
  s.finish();
  cv_.notify_all();
}

void StreamSessions::sweep_locked() {
  const int64_t now = unix_now();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    const int64_t at = it->second->finished_at();
    if (at != 0 && now - at >= kTtl.count()) {
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

std::shared_ptr<StreamSession> StreamSessions::open(const std::string& id) {
  std::lock_guard lock(mu_);
  sweep_locked();
  if (auto it = sessions_.find(id); it != sessions_.end()) {
    it->second->cancel();
    sessions_.erase(it);
  }
  if (sessions_.size() >= kMaxSessions) {
    // The oldest finished one makes room.
    auto oldest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      const int64_t at = it->second->finished_at();
      if (at != 0 && (oldest == sessions_.end() || at < oldest->second->finished_at())) oldest = it;
    }
    if (oldest == sessions_.end()) return nullptr;
    sessions_.erase(oldest);
  }
  auto s = std::make_shared<StreamSession>(id, scope_);
  sessions_.emplace(id, s);
  return s;
}

std::shared_ptr<StreamSession> StreamSessions::find(const std::string& id) {
  std::lock_guard lock(mu_);
  sweep_locked();
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<StreamSession>> StreamSessions::lookup(const std::vector<std::string>& ids) {
  std::lock_guard lock(mu_);
  sweep_locked();
  std::vector<std::shared_ptr<StreamSession>> out;
  for (const std::string& id : ids) {
    const std::string prefix = id + "::";
    for (const auto& [key, s] : sessions_) {
      if ((key == id || key.compare(0, prefix.size(), prefix) == 0) && std::find(out.begin(), out.end(), s) == out.end()) {
        out.push_back(s);
      }
    }
  }
  return out;
}

void StreamSessions::forget(const std::string& id, const StreamSession* which) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || (which && it->second.get() != which)) return;
  it->second->cancel();
  sessions_.erase(it);
}

size_t StreamSessions::count() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

size_t StreamSessions::bytes() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->kept();
  return n;
}

}  // namespace reclaim::server
