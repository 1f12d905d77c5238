// bench/device_idle: what giving an idle device back costs the next request.
//
//   build/bin/bench-device-idle --reclaim build-vulkan/bin/reclaim [--rounds 5] [--ctx 512]
//
// Two `reclaim serve` of the same test model on the same device, one with
// --device-idle 0 (the device is released as soon as no model holds it) and
// one with --device-idle never (it stays up, as before). Each round, on each
// server in turn: the model is loaded (POST /v1/models/load, timed), a
// streamed completion is sent (time to first token), and the model is
// unloaded; the first server then waits until its device is released. It
// prints the medians and the ratios released/warm of the load, of the time
// to first token and of both together. The first round warms each server
// (the warm server's device compiles its pipelines then) and is left out.
// GGML_VK_VISIBLE_DEVICES=0 names lavapipe (a Vulkan device on the CPU).
#include <cstdio>
#include <filesystem>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/stats.h"
#include "engine/test_model.h"
#include "http_client.h"

using namespace reclaim;
using namespace reclaim::bench;

namespace {

struct Round {
  double load_ms = 0, ttft_ms = 0;
};

Round one_round(ServerProcess& s) {
  Round r;
  Clock::time_point t0 = Clock::now();
  http_json(s.port, "POST", "/v1/models/load", {{"model", "m"}});
  r.load_ms = ms_since(t0);
  std::string all;
  bool first = false;
  t0 = Clock::now();
  const json body = {{"model", "m"}, {"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}, {"stream", true}};
  const int status = post_sse(s.port, "/v1/completions", body.dump(), [&](const json&) {
    if (!first) r.ttft_ms = ms_since(t0);
    first = true;
  }, all);
  if (status != 200 || !first) throw Error(s.name + ": the completion failed: " + all.substr(0, 300));
  http_json(s.port, "POST", "/v1/models/unload", {{"model", "m"}});
  s.wait_state("m", "unloaded");
  return r;
}

std::string device_state(ServerProcess& s) {
  return http_json(s.port, "GET", "/v1/resources")["devices"].value("state", "none");
}

void wait_released(ServerProcess& s) {
  const Clock::time_point t0 = Clock::now();
  while (device_state(s) != "released") {
    if (ms_since(t0) > 60000) throw Error(s.name + ": the device was not released within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What releasing an idle device costs the next load and its first token"};
  std::string reclaim = RECLAIM_BIN, dir;
  int rounds = 5, ctx = 512;
  app.add_option("--reclaim", reclaim, "the reclaim binary, built with a device (scripts/setup --backend vulkan)")
      ->capture_default_str();
  app.add_option("--rounds", rounds, "measured rounds a server")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--ctx", ctx)->capture_default_str();
  app.add_option("--dir", dir, "where the test model is written (default: a folder under /tmp)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (dir.empty()) dir = (std::filesystem::temp_directory_path() / "reclaim-bench-device-idle").string();
    std::filesystem::create_directories(dir);
    const std::string model = dir + "/m.gguf";
    if (!std::filesystem::exists(model)) {
      TestModelSpec spec;
      spec.vocab = "spm";
      spec.n_embd = 256;
      spec.n_layer = 2;
      make_test_model(spec, model);
    }
    auto server = [&](const std::string& name, const std::string& idle) {
      ServerProcess s;
      s.name = name;
      s.port = free_port();
      s.log = dir + "/" + name + ".log";
      s.argv = {reclaim, "serve", "--port", std::to_string(s.port), "-m", model + ":m", "--ctx", std::to_string(ctx),
                "--gpu-layers", "-1", "--device-idle", idle, "--trust-models"};
      s.state = [](const json& m) { return m.value("state", ""); };
      return s;
    };
    ServerProcess released = server("released", "0"), warm = server("warm", "never");
    released.start();
    warm.start();
    if (device_state(released) == "none") throw Error(reclaim + " has no accelerator here (build it with scripts/setup --backend vulkan)");
    std::vector<double> load[2], ttft[2], both[2];
    for (int i = 0; i <= rounds; ++i) {
      wait_released(released);
      const Round a = one_round(released);
      const Round b = one_round(warm);
      if (i == 0) continue;
      for (int k = 0; k < 2; ++k) {
        const Round& r = k == 0 ? a : b;
        load[k].push_back(r.load_ms);
        ttft[k].push_back(r.ttft_ms);
        both[k].push_back(r.load_ms + r.ttft_ms);
      }
    }
    const json d = http_json(released.port, "GET", "/v1/resources")["devices"];
    released.stop();
    warm.stop();
    std::printf("device %s, %d rounds a server (medians)\n", d.value("names", "").c_str(), rounds);
    std::printf("%-28s %12s %12s %8s\n", "", "released", "warm", "ratio");
    auto line = [](const char* what, std::vector<double>& r, std::vector<double>& w) {
      const double mr = median(r), mw = median(w);
      std::printf("%-28s %9.1f ms %9.1f ms %8.2f\n", what, mr, mw, mr / mw);
    };
    line("load", load[0], load[1]);
    line("time to first token", ttft[0], ttft[1]);
    line("load + time to first token", both[0], both[1]);
    std::printf("the released server's device: released %llu times, brought up %llu times, last bring-up %.1f ms, last release %.1f ms\n",
                static_cast<unsigned long long>(d.value("releases", uint64_t{0})),
                static_cast<unsigned long long>(d.value("bring_ups", uint64_t{0})), d.value("last_bring_up_ms", 0.0),
                d.value("last_release_ms", 0.0));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-device-idle: %s\n", e.what());
    return 2;
  }
}
