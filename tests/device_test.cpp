// The device path, on the Vulkan variant (scripts/setup --backend vulkan):
// lavapipe, Mesa's Vulkan device on the CPU, whose device memory is host
// memory, so that whatever the device keeps shows in the process's figures.
// ctest sets GGML_VK_VISIBLE_DEVICES=0: ggml skips CPU-type Vulkan devices
// unless they are named.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "audit_report.h"
#include "cli_support.h"
#include "served.h"
#include "temp_path.h"

namespace {

using namespace reclaim::testing;
using nlohmann::json;

TEST(Device, TheVulkanDeviceIsThereAndTheModelGoesOnIt) {
  Result r = run("run -m " + spm() + " -p hello -n 2 --temp 0 --verbose --trust-models");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("using device Vulkan0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("offloaded 3/3 layers to GPU"), std::string::npos) << r.out;
  r = run("run -m " + spm() + " -p hello -n 2 --temp 0 --verbose --trust-models --gpu-layers 0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("offloaded 0/3 layers to GPU"), std::string::npos) << r.out;
}

// Every scenario, on the device, reclaim and raw llama.cpp side by side,
// within the CPU's thresholds once the device is warmed.
TEST(Device, EveryScenarioOnTheDeviceMeetsTheThresholds) {
  const json j = audit_json("-m " + spm() + " --scenario all --cycles 3 --requests 2 --generate 8 --threads 1 --compare-raw", 0);
  ASSERT_TRUE(j.contains("scenarios"));
  EXPECT_EQ(j["scenarios"].size(), 14u);
  for (const json& s : j["scenarios"]) {
    for (const json& c : s["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << s["scenario"] << ": " << c.dump();
    for (const char* side : {"reclaim", "raw"}) {
      const json& r = s[side];
      EXPECT_EQ(r["devices"], "Vulkan0") << s["scenario"] << " " << side;
      // The warm-up compiled the device's pipelines: tens of MiB on lavapipe.
      const int64_t warm = r["baseline"]["anon"].get<int64_t>() - r["device_warm_before"]["anon"].get<int64_t>();
      EXPECT_GT(warm, 1 << 20) << s["scenario"] << " " << side;
    }
  }
}

// Requests with images, the projector on the device with the model, beside
// plain llama.cpp with mtmd doing the same; one wave a cycle, run whole.
// Cancels and clients leaving mid-image are the CPU audit's
// (tests/audit_test.cpp). Disabled: on lavapipe a measured cycle of
// reclaim's side often meets a step width its warm-up cycle had not (the
// batch's widths follow when its two requests come and go), and lavapipe's
// pipeline for it stays (+13.5 MiB of anon, one map): 10 of 16 runs of the
// audit below failed so, alone. A warm-up step of each width 1-16 on a context
// of its own fixed that, but lavapipe (Mesa 22.3) then crashed in its queue
// thread in about one run in ten, at the first step of 3 tokens. Run it with
// --gtest_also_run_disabled_tests.
TEST(Device, DISABLED_ImagesWithTheProjectorOnTheDeviceMeetTheThresholds) {
  const json j = audit_json("-m " + seeing().model + " --mmproj " + seeing().mmproj +
                                " --scenario serve-vision --cycles 3 --requests 2 --generate 8 --threads 1 --compare-raw",
                            0);
  ASSERT_EQ(j["scenarios"].size(), 1u);
  const json& s = j["scenarios"][0];
  for (const json& c : s["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
  for (const char* side : {"reclaim", "raw"}) EXPECT_EQ(s[side]["devices"], "Vulkan0") << side;
}

// The seed's case (load and free with no prompt) and the prompt case, over
// ten cycles: the targets.
TEST(Device, TenCyclesWithAndWithoutAPromptLeaveNothingAfterTheWarmUp) {
  const json j = audit_json("-m " + spm() + " --scenario load-free,load-prompt-free --cycles 10 --threads 1", 0);
  ASSERT_EQ(j["scenarios"].size(), 2u);
  for (const json& s : j["scenarios"]) {
    const json& residue = s["reclaim_residues"].back();
    EXPECT_LE(residue["anon"].get<int64_t>(), 1 << 20) << s["scenario"];
    EXPECT_EQ(residue["threads"], 0) << s["scenario"];
    EXPECT_EQ(residue["maps"], 0) << s["scenario"];
    const int64_t growth = residue["anon"].get<int64_t>() - s["reclaim_residues"][0]["anon"].get<int64_t>();
    EXPECT_LE(growth, 64 << 10) << s["scenario"];
  }
}

// With no layers on the device llama.cpp still runs a prompt's matrix
// products there, so the audit warms it all the same.
TEST(Device, NoLayersOnTheDeviceStillMeetsTheThresholds) {
  const json j = audit_json("-m " + spm() + " --scenario load-prompt-free --cycles 3 --threads 1 --gpu-layers 0", 0);
  ASSERT_EQ(j["scenarios"].size(), 1u);
  EXPECT_EQ(j["scenarios"][0]["reclaim"]["devices"], "Vulkan0");
}

}  // namespace

namespace {

// reclaim serve on the device: load, chat, unload, twice. The first round
// warms the device (its pipelines stay until exit); after the second the
// server is back at the level the first left, seen from outside.
TEST(DeviceServe, LoadChatUnloadReturnsToThePostWarmUpLevel) {
  Served s({"--gpu-layers", "-1", "--device-idle", "never"});
  auto round = [&] {
    // The spm test model has no chat template: a completion.
    auto r = s.post("/v1/completions", {{"model", "spm"}, {"prompt", "hello"}, {"max_tokens", 8}, {"temperature", 0}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 8);
    // The weights, the KV cache and the compute buffers are on the device,
    // and the ledger says so, apart from host memory.
    const json m = s.model("spm");
    EXPECT_EQ(m["state"], "loaded") << m.dump();
    EXPECT_GT(m["bytes_by_device"].value("vulkan0", int64_t{0}), 1 << 20) << m.dump();
    EXPECT_GT(m["bytes_by_device"].value("host", int64_t{0}), 0) << m.dump();
    const json ledger = s.get("/v1/resources")["ledger"];
    EXPECT_GT(ledger["by_device"]["vulkan0"]["bytes"].get<int64_t>(), 1 << 20) << ledger["by_device"].dump();
    int placed = 0;
    for (const json& e : ledger["entries"]) placed += e.contains("device_bytes") ? 1 : 0;
    // And the prompt cache's: the request's cells, kept in the KV cache on
    // the device, are its share of the context's.
    EXPECT_EQ(placed, 3) << "the model's entry, its batch context's and its prompt cache's";
    ASSERT_EQ(s.post("/v1/models/unload", {{"model", "spm"}})->status, 200);
    ASSERT_TRUE(s.until([&] { return s.model("spm")["state"] == "unloaded"; }));
  };
  auto device_state = [&] {
    const json res = s.get("/v1/resources");
    for (const json& e : res["ledger"]["entries"]) {
      if (e["kind"] == "device_state") return e;
    }
    return json();
  };
  // From start-up: the driver's state, on the ledger under "runtime".
  const json at_start = device_state();
  ASSERT_FALSE(at_start.is_null());
  EXPECT_EQ(at_start["owner"], "runtime");
  round();
  // The pipelines the first round compiled stay with the driver: counted
  // there once the model is gone (tens of MiB on lavapipe).
  const int64_t kept = device_state()["bytes"].get<int64_t>() - at_start["bytes"].get<int64_t>();
  EXPECT_GT(kept, 4 << 20);
  const Outside warm = Outside::of(s.pid());
  round();
  Outside now;
  s.until([&] {
    now = Outside::of(s.pid());
    return now.threads <= warm.threads && now.fds <= warm.fds;
  });
  EXPECT_LE(now.anon - warm.anon, 1 << 20);
  EXPECT_EQ(now.threads, warm.threads);
  EXPECT_LE(now.fds, warm.fds);
  // The vetter may still be checking the other model's file in a child.
  json res;
  s.until([&] {
    res = s.get("/v1/resources");
    return held_beyond_standing(res["ledger"]).empty();
  });
  EXPECT_EQ(held_beyond_standing(res["ledger"]), std::vector<std::string>{}) << res["ledger"].dump();
  // At exit the device's state is said apart, and nothing else is left.
  const Result end = s.stop();
  EXPECT_EQ(end.status, 0) << end.err;
  EXPECT_NE(end.err.find("device runtime state, up at exit"), std::string::npos) << end.err;
  EXPECT_NE(end.err.find("ledger: 0 entries"), std::string::npos) << end.err;
}

}  // namespace

namespace {

int64_t vulkan_estimate(Served& s, const std::string& model) {
  return s.model(model)["estimate_by_device"].value("vulkan0", int64_t{0});
}

void load(Served& s, const std::string& model) {
  auto r = s.post("/v1/models/load", {{"model", model}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
}

// The device's memory has a budget of its own: two models whose device
// estimates fit it stay loaded together; one byte less and the first goes,
// though host memory has room for both.
TEST(DeviceServe, TheDeviceHasABudgetOfItsOwn) {
  int64_t spm_at = 0, bpe_at = 0;
  {
    Served s;
    load(s, "spm");
    load(s, "bpe");
    spm_at = vulkan_estimate(s, "spm");
    bpe_at = vulkan_estimate(s, "bpe");
    ASSERT_GT(spm_at, 0);
    ASSERT_GT(bpe_at, 0);
    const json res = s.get("/v1/resources");
    EXPECT_EQ(res["accounted_by_device"].value("vulkan0", int64_t{0}), spm_at + bpe_at) << res.dump();
  }
  for (int64_t minus : {0, 1}) {
    const std::string budget = "host=64GiB,vulkan0=" + std::to_string(spm_at + bpe_at - minus);
    Served s({"--memory-budget", budget});
    load(s, "spm");
    load(s, "bpe");
    EXPECT_EQ(s.model("bpe")["state"], "loaded");
    EXPECT_EQ(s.model("spm")["state"], minus ? "unloaded" : "loaded") << budget;
    EXPECT_EQ(s.get("/v1/resources")["memory_budget_by_device"]["vulkan0"], spm_at + bpe_at - minus);
  }
  // A device that is not here is an error at start-up.
  Result r = run("serve --port 0 --memory-budget cuda7=1GiB -m " + spm());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("'cuda7', which is not here (places: host, vulkan0)"), std::string::npos) << r.out;
}


// Each model its own GPU layers (--config): all of one model's weights on
// the device, none of the other's, in one server.
TEST(DeviceServe, EachModelHasTheGpuLayersItsConfigGives) {
  const std::string path = temp_path("device-models.toml");
  std::ofstream(path) << "[models.ondevice]\npath = \"" << spm() << "\"\ngpu_layers = -1\n"
                      << "[models.onhost]\npath = \"" << spm() << "\"\ngpu_layers = 0\n";
  Served s({"--config", path});
  auto weights_on_device = [&](const std::string& model) {
    const json ledger = s.get("/v1/resources")["ledger"];
    for (const json& e : ledger["entries"]) {
      if (e["kind"] == "model" && e["owner"] == "registry/model:" + model) return e.value("device_bytes", json::object());
    }
    ADD_FAILURE() << "no weights entry for " << model << ": " << ledger.dump();
    return json::object();
  };
  for (const char* m : {"ondevice", "onhost"}) {
    auto r = s.post("/v1/completions", {{"model", m}, {"prompt", "hello"}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  EXPECT_GT(weights_on_device("ondevice").value("vulkan0", int64_t{0}), 1 << 20);
  EXPECT_EQ(weights_on_device("onhost").value("vulkan0", int64_t{0}), 0);
  for (const char* m : {"ondevice", "onhost"}) s.post("/v1/models/unload", {{"model", m}});
}

json devices(Served& s) { return s.get("/v1/resources")["devices"]; }

// An idle device gives back its driver state, its pipelines and its threads,
// seen from outside the process; the next load brings it back and answers.
// With --device-idle 0 the device goes as soon as nothing holds it: at
// start-up, before any model, and after each unload.
TEST(DeviceServe, AnIdleDeviceGivesItsStateBackAndTheNextLoadBringsItBack) {
  Served s({"-m", spm() + ":spm", "--gpu-layers", "-1", "--device-idle", "0"}, false);
  ASSERT_TRUE(s.until([&] { return devices(s)["state"] == "released"; })) << devices(s).dump();
  auto device_entries = [&] {
    const json res = s.get("/v1/resources");
    int n = 0;
    for (const json& e : res["ledger"]["entries"]) n += e["kind"] == "device_state";
    return n;
  };
  EXPECT_EQ(device_entries(), 0);
  const Outside before = Outside::of(s.pid());  // before the device's first use
  auto round = [&](uint64_t releases) {
    auto r = s.post("/v1/completions", {{"model", "spm"}, {"prompt", "hello"}, {"max_tokens", 8}, {"temperature", 0}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json d = devices(s);
    EXPECT_EQ(d["state"], "in_use") << d.dump();
    EXPECT_EQ(device_entries(), 1);
    EXPECT_GT(s.model("spm")["bytes_by_device"].value("vulkan0", int64_t{0}), 1 << 20);
    ASSERT_EQ(s.post("/v1/models/unload", {{"model", "spm"}})->status, 200);
    ASSERT_TRUE(s.until([&] { return devices(s)["releases"] == releases; })) << devices(s).dump();
    EXPECT_EQ(devices(s)["state"], "released");
    EXPECT_EQ(device_entries(), 0);
  };
  round(2);
  // lavapipe's threads end with the device; its compiled pipelines and its
  // heap go with it (tens of MiB were kept until exit before).
  Outside after;
  s.until([&] {
    after = Outside::of(s.pid());
    return after.threads <= before.threads && after.maps <= before.maps;
  });
  EXPECT_LE(after.threads, before.threads);
  EXPECT_LE(after.maps, before.maps);
  EXPECT_LE(after.anon - before.anon, 1 << 20);
  round(3);
  const Outside again = Outside::of(s.pid());
  EXPECT_LE(again.anon - after.anon, 256 << 10);
  const json d = devices(s);
  EXPECT_EQ(d["bring_ups"], 2) << d.dump();
  EXPECT_GT(d["last_bring_up_ms"].get<double>(), 0);
  const std::string metrics = s.http().Get("/metrics")->body;
  EXPECT_NE(metrics.find("reclaim_device_state{state=\"released\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("reclaim_device_releases_total 3"), std::string::npos);
  Result ps = run("ps --url http://127.0.0.1:" + std::to_string(s.port()));
  EXPECT_NE(ps.out.find("device Vulkan0: released"), std::string::npos) << ps.out;
  const Result end = s.stop();
  EXPECT_EQ(end.status, 0) << end.err;
  EXPECT_NE(end.err.find("ledger: 0 entries"), std::string::npos) << end.err;
}

// --device-idle never keeps the device up, as before.
TEST(DeviceServe, NeverKeepsTheDeviceUp) {
  Served s({"-m", spm() + ":spm", "--device-idle", "never"}, false);
  const json d = devices(s);
  EXPECT_EQ(d["state"], "idle") << d.dump();
  EXPECT_TRUE(d["release_after_s"].is_null());
  Result r = run("serve --port 0 --device-idle soon -m " + spm());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("device-idle"), std::string::npos) << r.out;
}

}  // namespace

namespace {

// The audit's device-idle scenario: load, prompt and free on the device,
// then the release, measured from before the device's first use (no warm-
// up). reclaim is back within the thresholds; raw llama.cpp keeps what the
// device's first use took.
TEST(Device, DeviceIdleGivesBackWhatTheFirstUseTook) {
  const json j = audit_json("-m " + spm() + " --scenario device-idle --cycles 3 --threads 1 --compare-raw", 0);
  ASSERT_EQ(j["scenarios"].size(), 1u);
  const json& s = j["scenarios"][0];
  for (const json& c : s["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
  const json& raw = s["raw_residues"].back();
  EXPECT_GT(raw["anon"].get<int64_t>(), 4 << 20) << raw.dump();
  EXPECT_GT(raw["threads"].get<int64_t>(), 0) << raw.dump();
}

}  // namespace
