// `reclaim serve` end to end: the real server on a free loopback port, talked
// to over HTTP, and after each test nothing left of its requests or models.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <httplib.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <map>
#include <sstream>
#include <thread>

#include "served.h"
#include "served_parity.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

TEST(Serve, ChatStreamedAndNotAndCompletionsThenNothingIsLeft) {
  Served s;
  // The stream below is compared with the plain reply token for token: after
  // this first request, each finds the prompt in the cache and is decoded
  // the same way (engine/parity.h).
  ASSERT_TRUE(s.post("/v1/chat/completions", chat(1)));
  auto r = s.post("/v1/chat/completions", chat(8));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");

  json req = chat(8, true);
  req["stream_options"] = {{"include_usage", true}};
  r = s.post("/v1/chat/completions", req);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::string text;
  int chunks = 0;
  bool done = false, usage = false, timings = false;
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    json c = json::parse(data);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c.contains("usage")) {
      usage = true;
      EXPECT_EQ(c["usage"]["completion_tokens"], 8);
      continue;
    }
    ++chunks;
    if (c["choices"][0]["delta"].contains("content") && c["choices"][0]["delta"]["content"].is_string()) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
    // The finishing chunk carries llama-server's timings, as its clients read them.
    if (!c["choices"][0]["finish_reason"].is_null()) {
      timings = true;
      EXPECT_EQ(c["timings"]["predicted_n"], 8) << data;
      EXPECT_TRUE(c["timings"]["prompt_ms"].is_number()) << data;
    } else {
      EXPECT_FALSE(c.contains("timings")) << data;
    }
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(usage);
  EXPECT_TRUE(timings);
  EXPECT_GT(chunks, 1);
  EXPECT_EQ(text, j["choices"][0]["message"]["content"]) << "the stream and the plain response differ";

  r = s.post("/v1/completions", {{"model", "spm"}, {"prompt", "Once"}, {"max_tokens", 5}});
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 5);
  EXPECT_EQ(s.model("spm")["state"], "loaded");
  s.expect_clean();
  Result end = s.stop();
  EXPECT_EQ(end.status, 0) << end.err;
  EXPECT_NE(end.err.find("ledger: 0 entries"), std::string::npos) << end.err;
}

TEST(Serve, EveryThreadOfTheServerIsOnTheLedgerUnderItsOwner) {
  Served s({"--parallel", "2"});
  auto threads_on_ledger = [&](const json& r) {
    std::map<std::string, int> by_owner;
    int all = 0;
    for (const json& e : r["ledger"]["entries"]) {
      if (e["kind"] != "thread") continue;
      // A model's threadpool is one entry for its n threads ("threadpool n=2").
      const std::string label = e["label"];
      const int n = label.rfind("threadpool n=", 0) == 0 ? std::stoi(label.substr(13)) : 1;
      by_owner[e["owner"].get<std::string>().substr(0, e["owner"].get<std::string>().find('/'))] += n;
      all += n;
    }
    return std::make_pair(by_owner, all);
  };
  // Idle: the accept loop, the HTTP threads that stay, the watchdog, the
  // dashboard's history sampler and the resumable streams' expiry, the
  // reaper, the vetter, once the vetting
  // start-up began (a thread and two children while it runs) has ended.
  ASSERT_TRUE(s.logged("vetted '" + spm() + "'"));
  ASSERT_TRUE(s.logged("vetted '" + bpe() + "'"));
  json r = s.get("/v1/resources");
  EXPECT_EQ(r["vetting"]["vetted"], 2) << r["vetting"].dump();
  EXPECT_EQ(r["vetting"]["running"], false) << r["vetting"].dump();
  auto [idle, idle_all] = threads_on_ledger(r);
  EXPECT_EQ(idle["serve"], 1) << r["ledger"].dump();
  EXPECT_EQ(idle["http"], 4 + 1 + 1 + 1) << r["ledger"].dump();  // and the watchdog, the sampler, the expiry
  EXPECT_EQ(idle["registry"], 1) << r["ledger"].dump();
  EXPECT_EQ(idle["vetter"], 1) << r["ledger"].dump();
  // Every thread the kernel counts is one of those, or the main thread (a
  // sanitizer adds threads of its own).
  if (!sanitized()) EXPECT_EQ(Outside::of(s.pid()).threads, idle_all + 1) << r["ledger"].dump();

  // A model loaded adds its batch's decode thread and its ggml workers, under
  // the model (in the registry's scope).
  auto ok = s.post("/v1/completions", {{"model", "spm"}, {"prompt", "Once"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  r = s.get("/v1/resources");
  bool decode_thread = false;
  for (const json& e : r["ledger"]["entries"]) {
    if (e["kind"] == "thread" && e["label"] == "batch decode thread") {
      decode_thread = true;
      EXPECT_EQ(e["owner"], "registry/model:spm/batch");
    }
  }
  EXPECT_TRUE(decode_thread) << r["ledger"].dump();
  s.expect_clean();
}

TEST(Serve, EveryErrorIsAnOpenAIErrorWithItsStatus) {
  Served s({"--memory-budget", "300MiB"});
  auto raw = [&](const std::string& body) { return s.http().Post("/v1/chat/completions", body, "application/json"); };
  expect_error(raw("{not json"), 400, "not valid JSON");
  expect_error(raw("[1,2]"), 400, "JSON object");
  expect_error(raw("{\"model\":\"spm\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"), 400,
               "not valid UTF-8 (byte 53)");
  auto completion = [&](const json& body) { return s.post("/v1/completions", body); };
  expect_error(completion({{"model", "spm"}, {"prompt", {999999999}}}), 400, "not in the vocabulary");
  expect_error(completion({{"model", "spm"}, {"prompt", {1, -1}}}), 400, "prompt token -1");
  json bad = chat(8);
  bad["temperature"] = 5;
  expect_error(s.post("/v1/chat/completions", bad), 400, "'temperature'");
  bad = chat(8);
  bad["n"] = 9;  // past the bound of choices
  expect_error(s.post("/v1/chat/completions", bad), 400, "it must be 1 to 8");
  bad = chat(8);
  bad.erase("messages");
  expect_error(s.post("/v1/chat/completions", bad), 400, "'messages'");
  expect_error(s.post("/v1/chat/completions", chat(5000)), 400, "context of 256 tokens");
  {
    // OpenAI's code, which its clients read, with llama-server's type and figures.
    const json e = json::parse(s.post("/v1/chat/completions", chat(5000))->body)["error"];
    EXPECT_EQ(e["code"], "context_length_exceeded") << e.dump();
    EXPECT_EQ(e["type"], "exceed_context_size_error");
    EXPECT_GT(e["n_prompt_tokens"].get<int>(), 0);
    EXPECT_EQ(e["n_ctx"], 256);
  }
  bad = chat(8);
  bad["model"] = "../../etc/passwd";
  expect_error(s.post("/v1/chat/completions", bad), 400, "not a name");
  bad["model"] = "nope";
  expect_error(s.post("/v1/chat/completions", bad), 404, "'nope'");
  // An image that is no data: URL is the client's mistake, named.
  bad["model"] = "spm";
  bad["messages"] = json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}})}}});
  expect_error(s.post("/v1/chat/completions", bad), 400, "must be a data: URL");
  expect_error(s.http().Post("/v1/completions", std::string(33u << 20, 'x'), "application/json"), 413, "larger");
  expect_error(s.post("/v1/models/unload", {{"model", "spm"}, {"mode", "later"}}), 400, "'mode'");
  s.expect_clean();
}

TEST(Serve, ABudgetThatCannotHoldTheModelIs503WithRetryAfter) {
  Served s({"--memory-budget", "1MiB"});
  auto r = s.post("/v1/chat/completions", chat(4));
  expect_error(r, 503, "more than the whole memory budget");
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  EXPECT_EQ(s.model("bpe")["state"], "unloaded");
  s.expect_clean();
}

TEST(Serve, AnApiKeyGuardsEverythingButHealth) {
  Served s({"--api-key", "s3cret"});
  EXPECT_EQ(s.http().Get("/health")->status, 200);
  expect_error(s.http().Get("/v1/models"), 401, "API key");
  expect_error(s.post("/v1/chat/completions", chat(4), {{"Authorization", "Bearer wrong"}}), 401, "API key");
  auto ok = s.post("/v1/chat/completions", chat(4), {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST(Serve, AClientThatVanishesMidStreamEndsItsRequest) {
  Served s({"--keep-alive", "-1"});
  // Long enough to be left mid-way, short enough for the test's context.
  leave_after_first_chunk(s.port(), chat(200, true));
  EXPECT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 0; })) << s.model("bpe").dump();
  // The model stays loaded (keep-alive -1); its batch context is all that is held.
  json r = s.get("/v1/resources");
  for (const auto& [owner, t] : r["ledger"]["by_owner"].items()) {
    EXPECT_EQ(owner.find("request:"), std::string::npos) << owner << " outlived its request";
  }
  s.expect_clean();
}

TEST(Serve, ConcurrentStreamsDecodeTogetherAndEachGetsItsOwnText) {
  Served s({"--parallel", "4", "--keep-alive", "-1"});
  auto ask = [&](int i, bool stream) {
    json req = chat(48, stream);
    req["messages"][0]["content"] = "question number " + std::to_string(i) + (i % 2 ? " about rivers" : "");
    req["logprobs"] = true;
    req["top_logprobs"] = reclaim::kParityLogprobs;
    return req;
  };
  Answers answers;
  std::mutex answers_lock;
  std::vector<reclaim::GenerateResult> alone(4);
  for (int i = 0; i < 4; ++i) {
    auto r = s.post("/v1/chat/completions", ask(i, false));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    answers.add(json::parse(r->body)["choices"][0], alone[static_cast<size_t>(i)]);
  }
  auto steps = [&] { return s.model("bpe")["batch"]["decode_steps"].get<uint64_t>(); };
  const uint64_t steps_alone = steps();
  EXPECT_EQ(s.model("bpe")["batch"]["sequences"], 4);
  // Four streams at once, and a fifth client that leaves after its first chunk.
  auto stream = [&](int i) {
    return std::async(std::launch::async, [&, i] {
      httplib::Client c("127.0.0.1", s.port());
      c.set_read_timeout(120, 0);
      auto r = c.Post("/v1/chat/completions", ask(i, true).dump(), "application/json");
      reclaim::GenerateResult got;
      if (!r || r->status != 200) {
        got.text = std::string("status ") + (r ? std::to_string(r->status) : "none");
        return got;
      }
      std::istringstream lines(r->body);
      std::lock_guard hold(answers_lock);
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("data: {", 0) != 0) continue;
        answers.add(json::parse(line.substr(6))["choices"][0], got);
      }
      return got;
    });
  };
  auto leaver = std::async(std::launch::async, [&] {
    json req = ask(9, true);
    req["max_tokens"] = 200;
    leave_after_first_chunk(s.port(), req);
  });
  std::vector<std::future<reclaim::GenerateResult>> got;
  for (int i = 0; i < 4; ++i) got.push_back(stream(i));
  for (size_t i = 0; i < 4; ++i) expect_as_alone(alone[i], got[i].get(), "stream " + std::to_string(i));
  leaver.get();
  EXPECT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 0; })) << s.model("bpe").dump();
  // Together the same four took fewer decodes than one after another.
  EXPECT_LT(steps() - steps_alone, steps_alone) << s.model("bpe").dump();
  EXPECT_EQ(s.model("bpe")["batch"]["active"], 0);
  json r = s.get("/v1/resources");
  for (const auto& [owner, t] : r["ledger"]["by_owner"].items()) {
    EXPECT_EQ(owner.find("request:"), std::string::npos) << owner << " outlived its request";
  }
  s.expect_clean();
}

TEST(Serve, UnloadDrainsOrCancelsWhatRuns) {
  Served s({"--keep-alive", "-1"});
  auto busy = [&] {
    return std::async(std::launch::async, [&] {
      httplib::Client c("127.0.0.1", s.port());
      c.set_read_timeout(120, 0);
      json req = chat(-1);
      req.erase("max_tokens");  // chat without max_tokens runs until the context is full
      return c.Post("/v1/chat/completions", req.dump(), "application/json");
    });
  };
  auto running = busy();
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  auto r = s.post("/v1/models/unload", {{"model", "bpe"}, {"mode", "cancel"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["state"], "unloaded");
  auto answer = running.get();
  ASSERT_TRUE(answer);
  expect_error(answer, 503, "cancelled");

  // A stream cancelled by an unload still ends as OpenAI's clients expect:
  // finish_reason "length" (cut short), then [DONE].
  // Cancelled once its first bytes are out: before, a stream that has not
  // started answers the cancel with its status (a 503), as it would any error.
  std::promise<void> begun;
  std::string streamed_body;
  auto streaming = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    json req = chat(-1, true);
    req.erase("max_tokens");
    httplib::Request rq;
    rq.method = "POST";
    rq.path = "/v1/chat/completions";
    rq.body = req.dump();
    rq.set_header("Content-Type", "application/json");
    bool first = true;
    rq.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      streamed_body.append(data, n);
      if (first) begun.set_value();
      first = false;
      return true;
    };
    return c.send(rq);
  });
  ASSERT_EQ(begun.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_EQ(s.post("/v1/models/unload", {{"model", "bpe"}, {"mode", "cancel"}})->status, 200);
  auto streamed = streaming.get();
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_NE(streamed_body.find("\"finish_reason\":\"length\""), std::string::npos) << streamed_body.substr(0, 300);
  ASSERT_GE(streamed_body.size(), 14u);
  EXPECT_EQ(streamed_body.substr(streamed_body.size() - 14), "data: [DONE]\n\n");

  // drain: the request finishes first.
  auto short_one = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);  // it loads the model again, on a busy machine
    return c.Post("/v1/chat/completions", chat(60).dump(), "application/json");
  });
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  r = s.post("/v1/models/unload", {{"model", "bpe"}, {"mode", "drain"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto done = short_one.get();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200) << done->body;
  EXPECT_EQ(json::parse(done->body)["usage"]["completion_tokens"], 60);
  s.expect_clean();
}

TEST(Serve, KeepAliveZeroUnloadsAfterEachRequest) {
  Served s({"--keep-alive", "0"});
  ASSERT_EQ(s.post("/v1/chat/completions", chat(4))->status, 200);
  EXPECT_TRUE(s.until([&] { return s.model("bpe")["state"] == "unloaded"; }));
  EXPECT_EQ(s.model("bpe")["unloads"], 1);
  // A request's own keep_alive keeps it.
  json req = chat(4);
  req["keep_alive"] = "10m";
  ASSERT_EQ(s.post("/v1/chat/completions", req)->status, 200);
  EXPECT_EQ(s.model("bpe")["state"], "loaded");
  s.expect_clean();
}

TEST(Serve, MetricsAndPsShowTheModelsAndTheRequests) {
  Served s;
  ASSERT_EQ(s.post("/v1/chat/completions", chat(4))->status, 200);
  ASSERT_EQ(s.post("/v1/chat/completions", {{"model", "nope"}, {"messages", json::array()}})->status, 400);
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  const std::regex sample(R"(^[a-z_:]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+]+$)");
  std::istringstream lines(m->body);
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    ++samples;
  }
  EXPECT_GT(samples, 40);
  for (const char* want : {"reclaim_requests_total{outcome=\"ok\"} 1\n", "reclaim_requests_total{outcome=\"error\"} 1\n",
                           "reclaim_model_loaded{model=\"bpe\"} 1\n", "reclaim_model_loaded{model=\"spm\"} 0\n",
                           "reclaim_tokens_total{type=\"completion\"} 4\n", "reclaim_model_loads_total{model=\"bpe\"} 1\n",
                           "reclaim_requests_in_flight 0\n", "reclaim_ledger_device_bytes{device=\"host\"} ",
                           "reclaim_model_device_bytes{model=\"bpe\",device=\"host\"} ",
                           // llama-server's names, of the same counts.
                           "llamacpp:tokens_predicted_total 4\n", "llamacpp:requests_processing 0\n",
                           "llamacpp:spec_decode_num_drafts_total 0\n"}) {
    EXPECT_NE(m->body.find(want), std::string::npos) << want << "\n" << m->body;
  }
  // The prompt's decoded tokens and the decode steps, as llama-server counts them.
  EXPECT_EQ(m->body.find("llamacpp:prompt_tokens_total 0\n"), std::string::npos) << m->body;
  EXPECT_EQ(m->body.find("llamacpp:n_decode_total 0\n"), std::string::npos) << m->body;
  const auto started = std::stoll(m->get_header_value("Process-Start-Time-Unix"));
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(started, now);
  EXPECT_GT(started, now - 3600);
  Result ps = run("ps --url http://127.0.0.1:" + std::to_string(s.port()));
  EXPECT_EQ(ps.status, 0) << ps.out;
  EXPECT_NE(ps.out.find("bpe"), std::string::npos) << ps.out;
  // Every field of the one table of a model's status is in each view: the
  // JSON (where it is always shown), /metrics, and ps's columns.
  const json fields = s.get("/v1/resources")["model_fields"];
  ASSERT_GT(fields.size(), 20u);
  const json bpe = s.model("bpe");
  for (const json& f : fields) {
    const std::string key = f["key"];
    if (f["always"] == true) {
      const json& where = f["group"].is_null() ? bpe : bpe.value(f["group"].get<std::string>(), json::object());
      EXPECT_TRUE(where.contains(key)) << key << " " << bpe.dump();
    }
    if (f["metric"].is_string()) {
      const std::string metric = f["metric"];
      EXPECT_NE(m->body.find("# TYPE " + metric + " " + f["metric_type"].get<std::string>() + "\n"), std::string::npos)
          << metric;
      EXPECT_NE(m->body.find(metric + "{model=\"bpe\""), std::string::npos) << metric;
    }
    if (f["column"].is_string()) EXPECT_NE(ps.out.find(f["column"].get<std::string>()), std::string::npos) << key;
  }
  EXPECT_NE(ps.out.find("loaded"), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find("model:bpe/batch"), std::string::npos) << ps.out;
  // A counter: an unloaded model's decodes stay counted.
  auto decodes = [&s] {
    const std::string body = s.http().Get("/metrics")->body;
    const std::string key = "\nllamacpp:n_decode_total ";
    return std::stoull(body.substr(body.find(key) + key.size()));
  };
  const unsigned long long before = decodes();
  s.post_json("/v1/models/unload", {{"model", "bpe"}});
  EXPECT_EQ(decodes(), before);
  s.expect_clean();
  ps = run("ps --url http://127.0.0.1:1");
  EXPECT_EQ(ps.status, 2);
  EXPECT_NE(ps.out.find("cannot reach"), std::string::npos) << ps.out;
}

// Prometheus' own checker (Debian's prometheus package, which set-up
// installs) on /metrics taken while streams run, and the histograms filled.
TEST(Serve, MetricsPassPromtoolWhileRequestsRun) {
  ASSERT_EQ(std::system("command -v promtool >/dev/null"), 0) << "promtool is not installed (scripts/setup installs prometheus)";
  Served s({"--parallel", "2"});
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&s] {
      httplib::Client c("127.0.0.1", s.port());
      c.set_read_timeout(120, 0);
      (void)c.Post("/v1/chat/completions", chat(48, true).dump(), "application/json");
    });
  }
  std::string last;
  int checked = 0;
  s.until([&] {
    auto m = s.http().Get("/metrics");
    if (!m) return false;
    last = m->body;
    // llama-server's families keep its names, which promtool's lint flags
    // (a colon, a counter without _total) as it flags llama-server's own:
    // the rest is linted, and every sample's shape is checked by
    // MetricsAndPsShowTheModelsAndTheRequests.
    std::istringstream in(last);
    std::string ours;
    for (std::string line; std::getline(in, line);) {
      if (line.find("llamacpp:") == std::string::npos) ours += line + "\n";
    }
    const std::string file = reclaim::testing::temp_path("metrics.txt");
    std::ofstream(file) << ours;
    EXPECT_EQ(std::system(("promtool check metrics < " + file + " > " + file + ".out 2>&1").c_str()), 0)
        << std::ifstream(file + ".out").rdbuf() << "\n" << last;
    ++checked;
    return s.model("bpe")["loads"] == 1 && s.model("bpe")["in_flight"] == 0 && checked >= 3;
  });
  for (std::thread& t : clients) t.join();
  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* want : {"reclaim_first_token_seconds_count 2\n", "reclaim_generation_tokens_per_second_count 2\n",
                           "reclaim_model_load_seconds_count 1\n", "reclaim_first_token_seconds_bucket{le=\"+Inf\"} 2\n",
                           "# TYPE reclaim_queue_wait_seconds histogram\n"}) {
    EXPECT_NE(m->body.find(want), std::string::npos) << want << "\n" << m->body;
  }
  s.expect_clean();
}

// The bpe row of the last whole frame `reclaim ps --watch` drew (frames
// start with the cursor home and end by clearing what is below).
std::string last_bpe_row(const std::string& out) {
  const size_t end = out.rfind("\x1b[J");
  if (end == std::string::npos) return "";
  const size_t start = out.rfind("\x1b[H", end);
  const std::string frame = out.substr(start, end - start);
  const size_t row = frame.find("\nbpe ");
  return row == std::string::npos ? "" : frame.substr(row + 1, frame.find('\n', row + 1) - row - 1);
}

TEST(Serve, PsWatchRedrawsInPlaceAndFollowsAnUnload) {
  Served s({"--keep-alive", "10m"});
  s.post_json("/v1/models/load", {{"model", "bpe"}});
  Child watch({"ps", "--watch", "--every", "0.2", "--url", "http://127.0.0.1:" + std::to_string(s.port())});
  // Loaded, with the keep-alive left (9m59s or so) in its row.
  auto until_row = [&](const std::function<bool(const std::string&)>& pred) {
    return s.until([&] {
      watch.wait_for_output(watch.so_far().out.size() + 1, 0.2);
      return pred(last_bpe_row(watch.so_far().out));
    });
  };
  const std::regex minutes_left(" [0-9]m[0-9][0-9]s ");
  EXPECT_TRUE(until_row([&](const std::string& r) { return r.find(" loaded ") != std::string::npos && std::regex_search(r, minutes_left); }))
      << watch.so_far().out.substr(0, 2000);
  s.post_json("/v1/models/unload", {{"model", "bpe"}});
  EXPECT_TRUE(until_row([](const std::string& r) { return r.find(" unloaded ") != std::string::npos; }))
      << last_bpe_row(watch.so_far().out);
  // Every frame is drawn over the one before: the cursor goes home, never
  // a newline past the screen's end.
  const std::string& out = watch.so_far().out;
  size_t frames = 0;
  for (size_t at = out.find("\x1b[H"); at != std::string::npos; at = out.find("\x1b[H", at + 1)) ++frames;
  EXPECT_GE(frames, 2u);
  EXPECT_EQ(out.rfind("\x1b[H", 0), 0u) << "the first frame does not start at home";
  watch.signal(SIGINT);
  watch.wait();
  EXPECT_EQ(run("ps --every 0.2").status, 2);  // --every belongs to --watch
  s.expect_clean();
}

TEST(Serve, TheOfficialOpenAINodeSdkStreamsAChat) {
  const std::string sdk = RECLAIM_OPENAI_SDK;
  ASSERT_FALSE(sdk.empty()) << "built without RECLAIM_OPENAI_SDK: run scripts/setup, which fetches the SDK";
  ASSERT_TRUE(std::filesystem::exists(sdk + "/package.json")) << sdk;
  Served s;
  // Once for the prompt cache, so that the plain reply and the SDK's stream
  // are decoded the same way (engine/parity.h).
  ASSERT_TRUE(s.post("/v1/chat/completions", chat(1)));
  auto plain = s.post("/v1/chat/completions", chat(8));
  ASSERT_TRUE(plain);
  const std::string want = json::parse(plain->body)["choices"][0]["message"]["content"];
  int status = 0;
  const std::string out = run_sdk_script(RECLAIM_SDK_SCRIPT, sdk, s.port(), "bpe", status);
  ASSERT_EQ(status, 0) << out;
  json got = json::parse(out.substr(out.find('{')));
  EXPECT_EQ(got["text"], want);
  EXPECT_GT(got["chunks"].get<int>(), 1);
  EXPECT_EQ(got["finish"], "length");
  EXPECT_EQ(got["usage"]["completion_tokens"], 8);
  EXPECT_EQ(got["models"], json::array({"spm", "bpe"}));
  s.expect_clean();
}

TEST(Serve, SigtermLetsARunningRequestFinishThenUnloadsEverything) {
  Served s({"--shutdown-timeout", "60s"});
  auto running = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    return c.Post("/v1/chat/completions", chat(60).dump(), "application/json");
  });
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  Result end = s.stop();
  auto answer = running.get();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_EQ(json::parse(answer->body)["usage"]["completion_tokens"], 60);
  EXPECT_EQ(end.status, 0) << end.err;
  EXPECT_NE(end.err.find("ledger: 0 entries"), std::string::npos) << end.err;
}

TEST(Serve, SigtermCancelsWhatOutlivesTheShutdownTimeout) {
  Served s({"--shutdown-timeout", "0"});
  auto running = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    json req = chat(8);
    req.erase("max_tokens");  // until the context is full
    return c.Post("/v1/chat/completions", req.dump(), "application/json");
  });
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  Result end = s.stop();
  auto answer = running.get();
  ASSERT_TRUE(answer);
  expect_error(answer, 503, "cancelled");
  EXPECT_EQ(end.status, 0) << end.err;
  EXPECT_NE(end.err.find("ledger: 0 entries"), std::string::npos) << end.err;
}

TEST(Serve, PreloadAndPinAtStartUp) {
  Served s({"--preload", "spm", "--pin", "spm", "--keep-alive", "0"});
  json m = s.model("spm");
  EXPECT_EQ(m["state"], "loaded");
  EXPECT_TRUE(m["pinned"].get<bool>());
  ASSERT_EQ(s.post("/v1/completions", {{"model", "spm"}, {"prompt", "x"}, {"max_tokens", 2}})->status, 200);
  // Pinned: keep-alive 0 does not unload it.
  EXPECT_FALSE(s.until([&] { return s.model("spm")["state"] == "unloaded"; }, 0.5));
  s.expect_clean();
}

TEST(Serve, AFullQueueIs429WithRetryAfter) {
  Served s({"--parallel", "1", "--max-queue", "0"});
  auto running = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    json req = chat(8);
    req.erase("max_tokens");  // until the context is full: long enough to be seen running
    return c.Post("/v1/chat/completions", req.dump(), "application/json");
  });
  ASSERT_TRUE(s.until([&] { return s.model("bpe")["in_flight"] == 1; }));
  auto refused = s.post("/v1/chat/completions", chat(4));
  expect_error(refused, 429, "requests running");
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  auto done = running.get();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200);
  s.expect_clean();
}
