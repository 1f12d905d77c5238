// Resumable streams, as llama-server's web UI uses them: a streamed
// completion whose request carries X-Conversation-Id is written to a
// session kept here as well as to its client, and runs to its end when the
// client leaves (a page reloaded, a laptop put to sleep). GET
// /v1/stream?conv_id=ID&from=BYTE replays it from that byte and follows it;
// DELETE /v1/stream?conv_id=ID stops it and forgets it; POST
// /v1/streams/lookup says which of the ids a client names have one.
//
// Bounded: a session keeps at least the last kKeptBytes of its stream and
// at most kMaxBytes (a reader behind them gets 410; the front is dropped a
// quarter at a time, not at each chunk); at most kMaxSessions are kept (a
// new one takes the place of the oldest finished one; with all of them
// still running, a new one is a 429); a finished one goes kTtl after it
// finished, so that an idle server holds none: a thread of the server's, on
// the ledger, sleeps until the next one is due. Each session is an entry on
// the ledger, of the heap its bytes take, from its opening to its end.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/scope.h"
#include "core/scoped_thread.h"

namespace reclaim::server {

class StreamSession {
 public:
  // On the ledger under `scope`, which must outlive it (or close first).
  StreamSession(std::string id, Scope& scope);
  ~StreamSession();
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;
  const std::string& id() const { return id_; }

  void append(std::string_view data);
  void finish();  // the stream's last byte is in
  void cancel();  // DELETE: the run stops at its next step
  bool cancelled() const { return cancelled_.load(); }

  enum class Read { more, done, lost };
  // The bytes from `offset` on that are here, after waiting up to `wait`
  // for some: appended to `out`, `offset` moved past them. lost: `offset`
  // is before the first byte kept.
  Read read(size_t& offset, std::string& out, std::chrono::milliseconds wait);

  bool done() const;
  bool started() const;  // a byte written, or finished
  size_t total() const;  // bytes written, dropped ones too
  size_t kept() const;   // bytes held now
  size_t first_kept() const;  // the offset of the first of them (bytes dropped before it)
  int64_t started_at() const { return started_at_; }
  int64_t finished_at() const;  // unix seconds; 0 while it runs

 private:
  void account_locked();  // the ledger's entry follows the bytes' heap

  const std::string id_;
  const int64_t started_at_;
  Scope& scope_;
  const CleanupId entry_;
  size_t accounted_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> bytes_;
  size_t dropped_ = 0;  // bytes dropped from the front
  bool done_ = false;
  int64_t finished_at_ = 0;
  std::atomic<bool> cancelled_{false};
};

class StreamSessions {
 public:
  explicit StreamSessions(Scope& scope);  // its expiry thread, under `scope`
  ~StreamSessions();
  static constexpr size_t kMaxSessions = 64;
  static constexpr size_t kMaxBytes = size_t{4} << 20;
  static constexpr size_t kKeptBytes = kMaxBytes / 4 * 3;
  static constexpr std::chrono::seconds kTtl{300};

  // A new session for `id`, in place of any it had (cancelled). Null when
  // kMaxSessions are running.
  std::shared_ptr<StreamSession> open(const std::string& id);
  std::shared_ptr<StreamSession> find(const std::string& id);
  // The sessions of `ids`, each id's own and those named "ID::MODEL".
  std::vector<std::shared_ptr<StreamSession>> lookup(const std::vector<std::string>& ids);
  // Forgets `id`'s session (only `which`, where given), cancelling it.
  void forget(const std::string& id, const StreamSession* which = nullptr);
  // The session's last byte is in: it expires kTtl from now.
  void finish(StreamSession& s);

  size_t count() const;
  size_t bytes() const;

 private:
  void sweep_locked();
  void expire();  // the thread's body
  mutable std::mutex mu_;
  std::condition_variable cv_;  // a session finished, or the server stops
  bool stopping_ = false;
  Scope& scope_;  // the sessions' ledger entries'
  std::map<std::string, std::shared_ptr<StreamSession>> sessions_;
  ScopedThread expiry_;  // last: joined before the rest goes
};

}  // namespace reclaim::server
