// `reclaim pull NAME...`: models into reclaim's own store (runtime/stores/
// pull.h), with a progress bar on a terminal and plain lines otherwise.
// Ctrl-C leaves the partial blob, which the next pull continues; `reclaim
// pull --delete NAME` removes a pulled model and the blobs only it used.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/size.h"
#include "runtime/stores/pull.h"

namespace reclaim::cli {

namespace {

std::atomic<bool> g_interrupted{false};
void on_interrupt(int) { g_interrupted = true; }

using Clock = std::chrono::steady_clock;

// One line a layer: redrawn in place on a terminal (ten times a second at
// most), a line each tenth of the way otherwise.
class ProgressView {
 public:
  explicit ProgressView(bool tty) : tty_(tty) {}

  void operator()(const PullProgress& p) {
    if (p.total <= 0) {
      finish_line();
      if (p.status != "success") std::fprintf(stderr, "%s\n", p.status.c_str());
      return;
    }
    const auto now = Clock::now();
    if (p.digest != digest_) {
      finish_line();
      digest_ = p.digest;
      started_ = now;
      start_bytes_ = p.completed;
      last_tenth_ = -1;
      last_draw_ = {};
    }
    const bool done = p.completed >= p.total;
    const double secs = std::chrono::duration<double>(now - started_).count();
    const double rate = secs > 0.2 ? static_cast<double>(p.completed - start_bytes_) / secs : 0;
    const int percent = static_cast<int>(100.0 * static_cast<double>(p.completed) / static_cast<double>(p.total));
    char left[32] = "";
    if (rate > 0 && !done) std::snprintf(left, sizeof left, "  %.0fs left", static_cast<double>(p.total - p.completed) / rate);
    const std::string figures = format_bytes(p.completed) + "/" + format_bytes(p.total) +
                                (rate > 0 ? "  " + format_bytes(static_cast<int64_t>(rate)) + "/s" : "") + left;
    if (tty_) {
      if (!done && now - last_draw_ < std::chrono::milliseconds(100)) return;
      last_draw_ = now;
      constexpr int kWidth = 30;
      const int filled = percent * kWidth / 100;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(kWidth - filled), ' ');
      std::fprintf(stderr, "\r\033[K%s %3d%% [%s] %s", p.status.c_str(), percent, bar.c_str(), figures.c_str());
      open_line_ = true;
    } else if (percent / 10 != last_tenth_ || done) {
      last_tenth_ = percent / 10;
      std::fprintf(stderr, "%s %d%% %s\n", p.status.c_str(), percent, figures.c_str());
    }
    std::fflush(stderr);
  }

  void finish_line() {
    if (open_line_) std::fprintf(stderr, "\n");
    open_line_ = false;
  }

 private:
  bool tty_;
  bool open_line_ = false;
  std::string digest_;
  Clock::time_point started_, last_draw_;
  int64_t start_bytes_ = 0;
  int last_tenth_ = -1;
};

}  // namespace

Command add_pull(CLI::App& app) {
  auto* sub = app.add_subcommand("pull", "fetch models from Ollama's registry or Hugging Face into reclaim's store");
  struct Args {
    std::vector<std::string> names;
    std::string store;
    bool insecure = false, remove = false;
    int stall_seconds = 60;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("name", a->names,
                  "qwen2.5:7b (Ollama's library), ORG/REPO:QUANT or hf.co/ORG/REPO:QUANT (Hugging Face), "
                  "HOST/NS/MODEL:TAG")
      ->required();
  sub->add_option("--store", a->store, "where pulled models go (default: $RECLAIM_MODELS, ~/.local/share/reclaim/models)");
  sub->add_flag("--insecure", a->insecure, "plain HTTP to the registry (a mirror on your own network)");
  sub->add_flag("--delete", a->remove, "remove these pulled models, and the blobs no other pulled model uses");
  sub->add_option("--stall-seconds", a->stall_seconds,
                  "drop a transfer that brings under 64 KiB in this many seconds (what came is kept for the next pull)")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  return [a] {
    const std::string store = a->store.empty() ? pulled_store_root() : a->store;
    if (a->remove) {
      int status = 0;
      for (const std::string& name : a->names) {
        if (delete_pulled(store, name)) {
          std::fprintf(stderr, "deleted '%s'\n", name.c_str());
        } else {
          std::fprintf(stderr, "reclaim: error: '%s' is not a model in %s\n", name.c_str(), store.c_str());
          status = 2;
        }
      }
      return status;
    }
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    ProgressView view(::isatty(2) == 1);
    PullOptions o;
    o.store = store;
    o.insecure = a->insecure;
    o.stall = std::chrono::seconds(a->stall_seconds);
    o.progress = [&view](const PullProgress& p) { view(p); };
    o.cancelled = [] { return g_interrupted.load(); };
    for (const std::string& name : a->names) {
      try {
        const PullResult r = pull_model(name, o);
        view.finish_line();
        std::fprintf(stderr, "pulled '%s': %s (%s fetched) into %s\n", name.c_str(), format_bytes(r.bytes).c_str(),
                     format_bytes(r.fetched).c_str(), store.c_str());
      } catch (const PullError& e) {
        view.finish_line();
        std::fprintf(stderr, "reclaim: error: pull '%s': %s\n", name.c_str(), e.what());
        switch (e.kind()) {
          case PullError::Kind::bad_name:
          case PullError::Kind::not_found: return 2;
          case PullError::Kind::interrupted: return 130;
          default: return 1;
        }
      }
    }
    return 0;
  };
}

}  // namespace reclaim::cli
