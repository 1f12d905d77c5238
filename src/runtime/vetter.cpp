#include "runtime/vetter.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

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
  // Its cleanup, armed after the pipe's, runs before it: the thread may be
  // waiting on a child that the pipe stops.
  Scope::Slot thread = scope_.reserve(Kind::thread, "vetting thread");
  thread_ = std::thread([this] { background(); });
  thread.arm(0, [this] { stop_thread(); });
}

// vet() callers are the owner's; it has stopped them before this.
Vetter::~Vetter() { scope_.close(); }

void Vetter::stop_thread() noexcept {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  (void)!::write(stop_pipe_[1], "x", 1);
  thread_.join();
}

std::vector<std::string> Vetter::this_program() { return {self_exe(), kVetArg}; }

std::string Vetter::key(const VetRequest& q, const std::string& identity) {
  // The request names the path; the identity says which file is there now.
  return identity + "\n" + to_json(q).dump();
}

std::optional<VetReport> Vetter::known(const VetRequest& q) const {
  const std::string id = file_identity(q.path);
  if (id.empty()) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = verdicts_.find(key(q, id));
  if (it == verdicts_.end() || !it->second.done) return std::nullopt;
  return it->second.report;
}

VetReport Vetter::vet(const VetRequest& q) { return vet_impl(q, false); }

VetReport Vetter::vet_impl(const VetRequest& q, bool background) {
  // Missing, a folder, not GGUF: said plainly, and never cached, since the
  // file may appear.
  check_model_file(q.path);
  const std::string k = key(q, file_identity(q.path));
  std::unique_lock lock(mu_);
  if (!background) ++waiting_requests_;
  for (;;) {
    if (stopping_) {
      if (!background) --waiting_requests_;
      throw Error("vetting of '" + q.path + "' stopped: the vetter is shutting down");
    }
    Verdict& v = verdicts_[k];
    if (v.done) {
      if (!background) --waiting_requests_;
      ++counts_.cached;
      return verdict_or_throw(v.report);
    }
    // A request goes before the background queue.
    const bool my_turn = background ? waiting_requests_ == 0 : true;
    if (!v.running && !child_running_ && my_turn) break;
    cv_.wait(lock);
  }
  if (!background) --waiting_requests_;
  verdicts_[k].running = true;
  child_running_ = true;
  lock.unlock();
  VetReport r;
  std::exception_ptr failure;
  try {
    r = run_child_for(q);
  } catch (...) {
    failure = std::current_exception();
  }
  lock.lock();
  child_running_ = false;
  ++counts_.children;
  counts_.last_ms = r.ms;
  if (failure) {
    verdicts_.erase(k);
    cv_.notify_all();
    std::rethrow_exception(failure);
  }
  Verdict& v = verdicts_[k];
  v.running = false;
  v.done = true;
  v.report = r;
  // The verdict stays while the process lives; the template's text (up to
  // megabytes in a hostile file) is the model's to read when it loads.
  std::string().swap(v.report.info.chat_template);
  if (!r.ok) ++counts_.refused;
  cv_.notify_all();
  lock.unlock();
  if (options_.log || log_topic_enabled("models")) {
    if (r.ok) {
      std::fprintf(stderr, "reclaim: vetted '%s' in %.0f ms\n", q.path.c_str(), r.ms);
    } else {
      std::fprintf(stderr, "reclaim: refused '%s': %s\n", q.path.c_str(), r.error.c_str());
    }
  }
  return verdict_or_throw(r);
}

VetReport Vetter::run_child_for(const VetRequest& q) {
  ChildOptions co;
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
    r.error = "model file '" + q.path + "' crashed the vetting process (" + c.how_it_ended() + "): " + tail_lines(c.err);
    r.ms = ms;
    return r;
  }
  throw Error("the vetting process for '" + q.path + "' failed (" + c.how_it_ended() + "): " + tail_lines(c.err));
}

void Vetter::vet_in_background(std::vector<VetRequest> requests) {
  std::lock_guard lock(mu_);
  for (VetRequest& q : requests) queue_.push_back(std::move(q));
  cv_.notify_all();
}

void Vetter::background() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    VetRequest q = std::move(queue_.front());
    queue_.pop_front();
    background_busy_ = true;
    lock.unlock();
    try {
      (void)vet_impl(q, true);
    } catch (const std::exception&) {
      // The verdict is cached (or, for a failure to run, not): the request
      // that wants the model is told.
    }
    lock.lock();
    background_busy_ = false;
    cv_.notify_all();
  }
}

bool Vetter::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return queue_.empty() && !background_busy_; });
}

VetterCounts Vetter::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace reclaim
