#include "runtime/vetter.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

#include "core/child.h"
#include "core/defer.h"
#include "core/file_identity.h"
#include "core/ledger.h"

namespace reclaim {

namespace {

// The last lines of what the child wrote on stderr: an abort's message, or
// the exception that ended it.
std::string tail_lines(const std::string& err, size_t max_chars = 600) {
  std::string t = err;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  if (t.size() > max_chars) t = "..." + t.substr(t.size() - max_chars);
  for (char& c : t) {
    if (c == '\n') c = ';';
  }
  return t.empty() ? "it wrote nothing" : t;
}

// The report is the last line of stdout that is a JSON object with "ok".
std::optional<VetReport> report_in(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    size_t start = out.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    const std::string line = out.substr(start, end - start);
    if (!line.empty() && line[0] == '{') {
      try {
        nlohmann::json j = nlohmann::json::parse(line);
        if (j.is_object() && j.contains("ok")) return vet_report_from_json(j);
      } catch (const std::exception&) {
      }
    }
    if (start == 0) break;
    end = start - 1;
  }
  return std::nullopt;
}

// The child ran out of memory: the machine's state, not the file's fault,
// so no verdict is kept (ggml aborts on a failed allocation, and llama.cpp
// turns one into an error; both say so).
bool out_of_memory(const std::string& text) {
  for (const char* mark : {"bad_alloc", "failed to allocate", "Cannot allocate memory", "out of memory", "insufficient memory"}) {
    if (text.find(mark) != std::string::npos) return true;
  }
  return false;
}

// Where a part failed, in the order of a whole vetting: of two refusals, the
// earlier stage is the one a lone child would have reported.
int stage_rank(const std::string& stage) {
  int rank = 0;
  for (const char* s : {"metadata", "estimate", "load", "context", "decode", "tokenizer"}) {
    if (stage == s) return rank;
    ++rank;
  }
  return rank;  // "unknown": a crash without a verdict
}

VetReport verdict_or_throw(const VetReport& r) {
  if (!r.ok) throw InvalidModelFile(r.error);
  return r;
}

}  // namespace

Vetter::Vetter(VetterOptions options) : options_(std::move(options)), scope_("vetter") {
  if (options_.program.empty()) throw Error("the vetter needs a program to run");
  Scope::Slot pipe = scope_.reserve(Kind::fd, "stop pipe");
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) throw Error("cannot make the vetter's stop pipe");
  pipe.arm(0, [this] {
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  });
  // Started now, idle until asked, so that a server's baseline has it.
  // Its release, armed after the pipe's, runs before it: the thread may be
  // waiting on children that the pipe stops.
  thread_.start(scope_, "vetting thread", [this] { work(); }, [this] { wake_to_stop(); });
}

// vet() callers are the owner's; it has stopped them before this.
Vetter::~Vetter() { scope_.close(); }

void Vetter::wake_to_stop() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  (void)!::write(stop_pipe_[1], "x", 1);
}

std::vector<std::string> Vetter::this_program() { return {self_exe(), kVetArg}; }

std::string Vetter::key(const VetRequest& q, const std::string& identity) {
  // The request names the path; the identity says which file is there now.
  // And the projector's, which is vetted with it.
  return identity + "\n" + (q.mmproj.empty() ? "" : file_identity(q.mmproj) + "\n") + to_json(q).dump();
}

std::optional<VetReport> Vetter::known(const VetRequest& q) const {
  const std::string id = file_identity(q.path);
  if (id.empty()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = verdicts_.find(key(q, id));
  if (it == verdicts_.end() || it->second.phase != Phase::done) return std::nullopt;
  return it->second.report;
}

VetReport Vetter::vet(const VetRequest& q) { return wait_for(q, false); }

VetReport Vetter::vet_to_load(const VetRequest& q) { return wait_for(q, true); }

void Vetter::enqueue_locked(const std::string& k, const VetRequest& q, bool urgent) {
  auto [it, fresh] = verdicts_.try_emplace(k);
  if (fresh) forget_other_versions_locked(k);
  Verdict& v = it->second;
  if (!fresh && v.phase != Phase::failed) {
    // Waiting in the background queue: a caller moves it ahead.
    if (urgent && v.phase == Phase::queued) urgent_.push_back(k);
    cv_.notify_all();
    return;
  }
  // A run that could not give a verdict is tried again.
  if (!fresh) ++v.attempt;
  v.phase = Phase::queued;
  v.request = q;
  v.report = {};
  v.error = nullptr;
  (urgent ? urgent_ : background_).push_back(k);
  cv_.notify_all();
}

void Vetter::forget_other_versions_locked(const std::string& k) {
  // A file rewritten in place (a download finishing, a user's edit) is a new
  // version: the verdicts of the earlier ones would otherwise stay for as
  // long as the process lives, one more each time. Those still queued or
  // running are left to end; they are dropped at the next version.
  const std::string request = k.substr(k.find('\n'));
  for (auto it = verdicts_.begin(); it != verdicts_.end();) {
    const bool ended = it->second.phase == Phase::done || it->second.phase == Phase::failed;
    const bool other_version = it->first != k && it->first.size() >= request.size() &&
                               it->first.compare(it->first.size() - request.size(), request.size(), request) == 0;
    it = ended && other_version ? verdicts_.erase(it) : std::next(it);
  }
}

VetReport Vetter::wait_for(const VetRequest& q, bool to_load) {
  // Missing, a folder, not GGUF: said plainly, and never cached, since the
  // file may appear.
  check_model_file(q.path);
  const std::string k = key(q, file_identity(q.path));
  std::unique_lock lock(mu_);
  if (auto it = verdicts_.find(k); it != verdicts_.end() && it->second.phase == Phase::done) {
    ++counts_.cached;
    return verdict_or_throw(it->second.report);
  }
  enqueue_locked(k, q, true);
  int attempt = verdicts_[k].attempt;
  for (;;) {
    if (stopping_) throw Error("vetting of '" + q.path + "' stopped: the vetter is shutting down");
    const Verdict& v = verdicts_[k];
    if (v.phase == Phase::done) return verdict_or_throw(v.report);
    if (v.phase == Phase::loadable && to_load) return v.report;
    if (v.phase == Phase::failed && v.attempt == attempt) std::rethrow_exception(v.error);
    attempt = v.attempt;  // another caller's new run, after ours failed
    cv_.wait(lock);
  }
}

void Vetter::vet_in_background(std::vector<VetRequest> requests) {
  for (const VetRequest& q : requests) {
    try {
      check_model_file(q.path);
    } catch (const std::exception&) {
      continue;  // said to whoever asks for it
    }
    const std::string k = key(q, file_identity(q.path));
    std::lock_guard lock(mu_);
    enqueue_locked(k, q, false);
  }
}

void Vetter::work() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // The next key still queued: a caller's first, then the background's.
    std::string k;
    for (std::deque<std::string>* queue : {&urgent_, &background_}) {
      while (k.empty() && !queue->empty()) {
        std::string next = std::move(queue->front());
        queue->pop_front();
        if (auto it = verdicts_.find(next); it != verdicts_.end() && it->second.phase == Phase::queued) k = std::move(next);
      }
    }
    if (k.empty()) {
      // The queues may have held only stale keys: emptied now, which a
      // wait_idle() waits for.
      cv_.notify_all();
      cv_.wait(lock);
      continue;
    }
    Verdict& v = verdicts_[k];
    v.phase = Phase::running;
    const VetRequest q = v.request;
    busy_ = true;
    lock.unlock();
    VetReport r;
    std::exception_ptr failure;
    try {
      r = run_children(k, q);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    ++counts_.children;
    Verdict& ended = verdicts_[k];
    if (failure) {
      ended.phase = Phase::failed;
      ended.error = failure;
      cv_.notify_all();
      continue;
    }
    counts_.last_ms = r.ms;
    ended.phase = Phase::done;
    ended.report = r;
    // The verdict stays while the process lives; the template's text (up to
    // megabytes in a hostile file) is the model's to read when it loads.
    std::string().swap(ended.report.info.chat_template);
    if (!r.ok) ++counts_.refused;
    cv_.notify_all();
    if (options_.log || log_topic_enabled("models")) {
      lock.unlock();
      if (r.ok) {
        std::fprintf(stderr, "reclaim: vetted '%s' in %.0f ms\n", q.path.c_str(), r.ms);
      } else {
        std::fprintf(stderr, "reclaim: refused '%s': %s\n", q.path.c_str(), r.error.c_str());
      }
      lock.lock();
    }
  }
}

void Vetter::publish_loadable(const std::string& k, const VetReport& estimate) {
  std::lock_guard lock(mu_);
  Verdict& v = verdicts_[k];
  if (v.phase != Phase::running) return;
  v.phase = Phase::loadable;
  v.report = estimate;
  cv_.notify_all();
}

VetReport Vetter::run_children(const std::string& k, const VetRequest& q) {
  // The two parts at once, each in its own child: with two cores, a first
  // load waits for the longer part and not for the sum, and from the
  // decode part's real load on, the caller's own load runs beside its
  // decode (bench/vet).
  const auto t0 = std::chrono::steady_clock::now();
  VetRequest estimate_q = q, decode_q = q;
  estimate_q.part = VetPart::estimate;
  decode_q.part = VetPart::decode;
  // The file is loadable once the estimate is made and the decode part has
  // loaded it; whichever comes second says so. Each child says so as soon
  // as it knows, before its frees and its later stages.
  std::mutex parts_mu;
  std::optional<VetReport> estimated;
  bool loaded = false;
  // With parts_mu held; publishing twice is harmless (publish_loadable).
  auto publish_if_loadable = [&] {
    if (loaded && estimated && estimated->ok) publish_loadable(k, *estimated);
  };
  std::exception_ptr estimate_failure;
  std::thread estimating;
  // On the ledger while it runs. It is joined here before this returns,
  // however it ends (its child dies of the stop pipe on shutdown), so the
  // entry's release has nothing left to do, as a child's entry has not.
  const CleanupId thread = scope_.add(Kind::thread, "vetting thread: estimate of " + q.path, 0, [] {});
  Defer join([&] {
    if (estimating.joinable()) estimating.join();
    scope_.release(thread);
  });
  estimating = std::thread([&] {
    try {
      VetReport r = run_part(estimate_q, [&](const std::string& line) {
        std::optional<VetReport> early = estimated_report_in(line);
        if (!early) return;
        std::lock_guard lock(parts_mu);
        estimated = std::move(early);
        publish_if_loadable();
      });
      std::lock_guard lock(parts_mu);
      estimated = std::move(r);
      publish_if_loadable();
    } catch (...) {
      estimate_failure = std::current_exception();
    }
  });
  std::optional<VetReport> decoded;
  std::exception_ptr decode_failure;
  try {
    decoded = run_part(decode_q, [&](const std::string& line) {
      if (!is_loaded_line(line)) return;
      std::lock_guard lock(parts_mu);
      loaded = true;
      publish_if_loadable();
    });
  } catch (...) {
    decode_failure = std::current_exception();
  }
  std::move(join).invoke();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // A refusal is the file's verdict even where the other part could not
  // finish; the earlier stage's, where both refused.
  const VetReport* refusal = nullptr;
  for (const std::optional<VetReport>* r : {&estimated, &decoded}) {
    if (*r && !(*r)->ok && (!refusal || stage_rank((*r)->stage) < stage_rank(refusal->stage))) refusal = &**r;
  }
  if (refusal) {
    VetReport r = *refusal;
    r.ms = ms;
    return r;
  }
  if (estimate_failure) std::rethrow_exception(estimate_failure);
  if (decode_failure) std::rethrow_exception(decode_failure);
  VetReport r = *estimated;
  r.ms = ms;
  return r;
}

VetReport Vetter::run_part(const VetRequest& q, std::function<void(const std::string&)> on_line) {
  ChildOptions co;
  co.on_line = std::move(on_line);
  co.argv = options_.program;
  co.argv.push_back(to_json(q).dump());
  co.timeout = options_.timeout;
  co.stop_fd = stop_pipe_[0];
  // On an assert ggml attaches gdb to print a backtrace (seconds, on the
  // child's stdout); the verdict needs only the assert's own line.
  co.env_add = {"GGML_NO_BACKTRACE=1"};
  const auto t0 = std::chrono::steady_clock::now();
  // On the ledger while it runs. run_child reaps it before it returns,
  // however it ended, so the entry's release has nothing left to do.
  const CleanupId child = scope_.add(Kind::process, "vetting child: " + q.path, 0, [] {});
  Defer off([&] { scope_.release(child); });
  const ChildResult c = run_child(co);
  std::move(off).invoke();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::optional<VetReport> r = report_in(c.out);
  if ((r && !r->ok && out_of_memory(r->error)) || (!r && c.signal != 0 && out_of_memory(c.err))) {
    throw Error("vetting model file '" + q.path + "' ran out of memory; it will be tried again: " +
                (r ? r->error : tail_lines(c.err)));
  }
  if (r) {
    r->ms = ms;
    return *r;
  }
  if (c.stopped) throw Error("vetting of '" + q.path + "' stopped: the vetter is shutting down");
  if (c.timed_out) {
    throw Error("vetting model file '" + q.path + "' took longer than " + std::to_string(options_.timeout.count() / 1000) +
                " s (--vet-timeout); it will be tried again");
  }
  // SIGKILL is what the kernel's OOM killer sends: not the file's fault.
  if (c.signal == SIGKILL) {
    throw Error("vetting model file '" + q.path + "' was killed (signal 9, perhaps out of memory); it will be tried again");
  }
  if (c.signal != 0) {
    VetReport r;
    r.stage = "unknown";
    r.error = "model file '" + q.path + "'" + (q.mmproj.empty() ? "" : " or its projector '" + q.mmproj + "'") +
              " crashed the vetting process (" + c.how_it_ended() + "): " + tail_lines(c.err);
    r.ms = ms;
    return r;
  }
  throw Error("the vetting process for '" + q.path + "' failed (" + c.how_it_ended() + "): " + tail_lines(c.err));
}

bool Vetter::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return urgent_.empty() && background_.empty() && !busy_; });
}

VetterCounts Vetter::counts() const {
  std::lock_guard lock(mu_);
  VetterCounts c = counts_;
  c.running = busy_;
  for (const auto& [k, v] : verdicts_) {
    c.queued += v.phase == Phase::queued;
    c.kept += v.phase == Phase::done;
  }
  return c;
}

}  // namespace reclaim
