#include "soak_requests.h"

#include <algorithm>
#include <cstdio>

#include "http_client.h"

namespace reclaim::bench {

void Tally::add(const std::string& cause, bool expected) {
  std::lock_guard lock(mu_);
  ++(expected ? expected_ : unexpected_)[cause];
}

void Tally::ttft(double ms) {
  std::lock_guard lock(mu_);
  ttft_.push_back(ms);
}

int64_t Tally::unexpected() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const auto& [c, k] : unexpected_) n += k;
  return n;
}

void Tally::print() const {
  std::lock_guard lock(mu_);
  std::printf("outcomes, expected:\n");
  for (const auto& [c, k] : expected_) std::printf("  %-48s %7lld\n", c.c_str(), static_cast<long long>(k));
  std::printf("outcomes, unexpected:\n");
  for (const auto& [c, k] : unexpected_) std::printf("  %-48s %7lld\n", c.c_str(), static_cast<long long>(k));
  std::vector<double> t = ttft_;
  std::sort(t.begin(), t.end());
  auto pct = [&](double p) { return t.empty() ? 0.0 : t[std::min(t.size() - 1, static_cast<size_t>(p * t.size()))]; };
  std::printf("time to first token: p50 %.1f ms, p99 %.1f ms (%zu streams)\n", pct(0.50), pct(0.99), t.size());
}

namespace {

const std::vector<std::string>& bad_bodies() {
  static const std::vector<std::string> b = {
      "{",
      "[]",
      R"({"model":"a"})",
      R"({"model":"nope","prompt":"x"})",
      R"({"model":"../a","prompt":"x"})",
      R"({"model":"a","prompt":"x","max_tokens":-1})",
      R"({"model":"a","prompt":"x","temperature":"hot"})",
      R"({"model":"a","prompt":[999999999]})",
      R"({"model":"b","prompt":"x","top_p":2})",
      "{\"model\":\"a\",\"prompt\":\"\xff\"}",
      R"({"model":"c","prompt":"x","stop":[1]})",
  };
  return b;
}

// Bad bodies of the other APIs, each with its path.
const std::vector<std::pair<std::string, std::string>>& bad_api_bodies() {
  static const std::vector<std::pair<std::string, std::string>> b = [] {
    // Groups nested past the grammar's bound (engine/grammar_limits.h).
    const std::string nested = std::string(1200, '(') + "\\\"x\\\"" + std::string(1200, ')');
    std::vector<std::pair<std::string, std::string>> v = {
      {"/completion", R"({"model":"a","prompt":"x","grammar":"root ::= )" + nested + R"("})"},
      {"/v1/chat/completions", R"({"model":"a","messages":[{"role":"wizard","content":"x"}]})"},
      {"/v1/messages", R"({"model":"a","messages":[{"role":"user","content":"x"}]})"},  // no max_tokens
      {"/v1/responses", R"({"model":"a","input":42})"},
      {"/api/chat", R"({"model":"a","messages":"x"})"},
      {"/v1/embeddings", R"({"model":"a","input":[[]]})"},
      {"/v1/rerank", R"({"model":"a","query":"q","documents":["x"]})"},  // a is not a reranker
      {"/infill", R"({"model":"a","input_prefix":"x","input_suffix":"y"})"},  // a has no FIM tokens
      {"/completion", R"({"model":"a","prompt":"x","grammar":"root ::= undefined-rule"})"},
      {"/tokenize", R"({"model":"a","content":7})"},
    };
    return v;
  }();
  return b;
}

std::string random_model(std::mt19937& rng) {
  // Most traffic goes to one model, as it does on a team's server; the
  // others still swap in about one request in three.
  const unsigned m = rng() % 100;
  return kTextModels[m < 65 ? 0 : m < 85 ? 1 : 2];
}

json completion(const std::string& model, int i, int n, bool stream) {
  return {{"model", model}, {"prompt", "soak " + std::to_string(i)}, {"max_tokens", n}, {"temperature", 0}, {"stream", stream}};
}

json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

// Whether an answer's body says its model's unload cancelled it (a status
// or a stream's last event).
bool cancelled_by_unload(const std::string& body) { return body.find("being unloaded") != std::string::npos; }

// A request of `kind`, answered whole or streamed: expected when it is a
// 200 whose body has `end` (a stream's last event, "" for none), or when
// its model's unload cancelled it.
void call(int port, const std::string& kind, const std::string& path, const json& body, const std::string& end,
          Tally& tally, const std::string& headers = "") {
  std::string got;
  const int status = http(port, "POST", path, body.dump(), [&](const std::string& s) { got += s; }, nullptr, headers);
  // An error object or message, as each API writes one ("error": null is
  // Responses' field of a reply without one).
  const size_t error = std::min(got.find("\"error\":{"), got.find("\"error\":\""));
  if (cancelled_by_unload(got) && (status == 503 || status == 200)) {
    tally.add(kind + " cancelled by an unload", true);
  } else if (status == 200 && got.find(end) != std::string::npos && error == std::string::npos) {
    tally.add(kind + " ok", true);
  } else {
    const std::string what = error != std::string::npos ? got.substr(error, 60) : (status == 200 ? "no end" : got.substr(0, 60));
    tally.add(kind + " " + std::to_string(status) + ": " + what, false);
    std::fprintf(stderr, "bench-soak: %s %d: %s\n", kind.c_str(), status, got.substr(0, 600).c_str());
  }
}

// A streamed completion; `drop_after` events (-1: never) before hanging up.
void stream(int port, const std::string& model, int i, int n, int drop_after, Tally& tally) {
  const Clock::time_point t0 = Clock::now();
  std::string pending, all;
  int events = 0;
  bool first = false, done = false;
  std::string error_code;
  const int status = http(port, "POST", "/v1/completions", completion(model, i, n, true).dump(),
      [&](const std::string& piece) {
        pending += piece;
        all += piece;
        for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
          const std::string event = pending.substr(0, end);
          pending.erase(0, end + 2);
          if (event == "data: [DONE]") done = true;
          if (event.rfind("data: {", 0) != 0) continue;
          ++events;
          const json j = json::parse(event.substr(6), nullptr, false);
          if (j.is_discarded()) continue;
          if (j.contains("error")) error_code = j["error"].value("code", "error");
          if (!first && j.contains("choices") && !j["choices"].empty()) {
            first = true;
            tally.ttft(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
        }
      },
      [&] { return drop_after >= 0 && events >= drop_after; });
  if (drop_after >= 0) {
    tally.add("stream dropped by its client", true);
    return;
  }
  if (status == 200 && done && error_code.empty()) {
    tally.add("stream ok", true);
  } else if (status == 200 && !error_code.empty()) {
    tally.add("stream ended by an error event: " + error_code, false);
  } else if (status == 503 || status == 429) {
    const json j = json::parse(all, nullptr, false);
    tally.add("stream " + std::to_string(status) + " " + (j.is_object() ? j["error"].value("code", "") : ""), false);
  } else {
    tally.add("stream " + std::to_string(status) + (done ? "" : " without [DONE]"), false);
  }
}

void plain(int port, const std::string& model, int i, int n, Tally& tally) {
  std::string body;
  const int status = http(port, "POST", "/v1/completions", completion(model, i, n, false).dump(),
                          [&](const std::string& s) { body += s; });
  const json j = json::parse(body, nullptr, false);
  const std::string code = j.is_object() && j.contains("error") ? j["error"].value("code", "") : "";
  if (status == 200) {
    tally.add("completion ok", true);
  } else if (status == 503 && code == "cancelled") {
    tally.add("completion cancelled by an unload", true);
  } else {
    tally.add("completion " + std::to_string(status) + " " + code, false);
  }
}

// A resumable stream (X-Conversation-Id) whose client leaves after its
// first event; the stream is read again from its first byte to its end,
// then forgotten.
void resumed(int port, int i, int n, Tally& tally) {
  const std::string id = "soak-" + std::to_string(i);
  int events = 0;
  json body = completion("a", i, n, true);
  (void)http(port, "POST", "/v1/completions", body.dump(),
             [&](const std::string& piece) { events += piece.find("data: {") != std::string::npos; },
             [&] { return events > 0; }, "X-Conversation-Id: " + id + "\r\n");
  std::string replay;
  int status = 0;
  // Bounded: the request runs on without its client, a second or two here.
  for (int tries = 0; tries < 600; ++tries) {
    replay.clear();
    status = http(port, "GET", "/v1/stream?conv_id=" + id + "&from=0", "", [&](const std::string& s) { replay += s; });
    if (status != 503) break;  // 503: its request still waits for its model
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  (void)http(port, "DELETE", "/v1/stream?conv_id=" + id, "", [](const std::string&) {});
  if (cancelled_by_unload(replay)) {
    tally.add("resumed stream cancelled by an unload", true);
  } else if (status == 200 && replay.find("data: [DONE]") != std::string::npos) {
    tally.add("resumed stream ok", true);
  } else if (status == 404 && events == 0) {
    tally.add("resumed stream refused before it started", true);  // its model was unloaded meanwhile
  } else {
    tally.add("resumed stream " + std::to_string(status) + ": " + replay.substr(0, 80), false);
  }
}

// The other APIs, one at random.
void api(int port, int i, int n, std::mt19937& rng, Tally& tally) {
  const std::string model = random_model(rng), text = "soak " + std::to_string(i);
  const bool streamed = rng() % 2 == 0;
  switch (rng() % 10) {
    case 0: {
      json body = {{"model", model}, {"messages", user(text)}, {"max_tokens", n}, {"stream", streamed}};
      if (rng() % 2 == 0) {
        body["response_format"] = {{"type", "json_schema"},
                                   {"json_schema", {{"name", "answer"},
                                                    {"schema", {{"type", "object"},
                                                                {"properties", {{"ok", {{"type", "boolean"}}}}},
                                                                {"required", {"ok"}}}}}}};
      }
      call(port, "chat", "/v1/chat/completions", body, streamed ? "data: [DONE]" : "\"choices\"", tally);
      break;
    }
    case 1:
      call(port, "anthropic messages", "/v1/messages",
           {{"model", model}, {"messages", user(text)}, {"max_tokens", n}, {"stream", streamed}},
           streamed ? "event: message_stop" : "\"stop_reason\"", tally);
      break;
    case 2:
      call(port, "responses", "/v1/responses",
           {{"model", model}, {"input", text}, {"max_output_tokens", n}, {"stream", streamed}},
           streamed ? "\"sequence_number\"" : "\"output\"", tally);
      break;
    case 3:
      call(port, "ollama chat", "/api/chat",
           {{"model", model}, {"messages", user(text)}, {"stream", streamed}, {"options", {{"num_predict", n}}}},
           "\"done\":true", tally);
      break;
    case 4:
      call(port, "ollama generate", "/api/generate",
           {{"model", model}, {"prompt", text}, {"stream", streamed}, {"options", {{"num_predict", n}}}},
           "\"done\":true", tally);
      break;
    case 5:
      call(port, "embeddings", "/v1/embeddings", {{"model", model}, {"input", {text, "another " + text}}},
           "\"embedding\"", tally);
      break;
    case 6: {
      std::string got;
      const int status = http(port, "POST", "/tokenize", json{{"model", model}, {"content", text}}.dump(),
                              [&](const std::string& s) { got += s; });
      const json tokens = json::parse(got, nullptr, false);
      if (status != 200 || !tokens.is_object() || !tokens.contains("tokens")) {
        call(port, "tokenize", "/tokenize", {{"model", model}, {"content", text}}, "\"tokens\"", tally);
        break;
      }
      call(port, "tokenize and detokenize", "/detokenize", {{"model", model}, {"tokens", tokens["tokens"]}},
           "\"content\"", tally);
      break;
    }
    case 7:
      call(port, "grammar", "/completion",
           {{"model", model}, {"prompt", text}, {"n_predict", n},
            {"grammar", "root ::= (\"yes\" | \"no\" | [a-z]+) (\" \" [a-z]+)*"}},
           "\"content\"", tally);
      break;
    case 8:
      call(port, "infill", "/infill",
           {{"model", "b"}, {"input_prefix", "int main() {\n"}, {"prompt", "  int n = "}, {"input_suffix", "}\n"},
            {"n_predict", n}, {"stream", streamed}},
           "\"content\"", tally);
      break;
    default:
      call(port, "rerank", "/v1/rerank",
           {{"model", kReranker}, {"query", text}, {"documents", {"a cat", "a dog", text}}, {"top_n", 2}},
           "\"relevance_score\"", tally);
      break;
  }
}

}  // namespace

void one_request(int port, int i, std::mt19937& rng, Tally& tally) {
  const int pick = static_cast<int>(rng() % 100);
  const std::string model = random_model(rng);
  const int n = 8 + static_cast<int>(rng() % 25);
  if (pick < 28) {
    stream(port, model, i, n, -1, tally);
  } else if (pick < 38) {
    stream(port, model, i, n, static_cast<int>(rng() % 5), tally);
  } else if (pick < 52) {
    plain(port, model, i, n, tally);
  } else if (pick < 54) {
    // Any model, the reranker too.
    const std::string which = rng() % 8 == 0 ? kReranker : model;
    std::string body;
    const int status = http(port, "POST", "/v1/models/unload", json{{"model", which}, {"mode", "cancel"}}.dump(),
                            [&](const std::string& s) { body += s; });
    tally.add(status == 200 ? "cancel-unload ok" : "cancel-unload " + std::to_string(status), status == 200);
  } else if (pick < 66) {
    const bool other_api = rng() % 2 == 0;
    const auto& [path, b] = other_api ? bad_api_bodies()[rng() % bad_api_bodies().size()]
                                      : std::pair<std::string, std::string>{"/v1/completions", bad_bodies()[rng() % bad_bodies().size()]};
    std::string got;
    const int status = http(port, "POST", path, b, [&](const std::string& s) { got += s; });
    const bool client_error = status >= 400 && status < 500;
    tally.add(client_error ? "bad body refused with a 4xx"
                           : "bad body to " + path + " answered " + std::to_string(status) + ": " + got.substr(0, 60),
              client_error);
  } else if (pick < 70) {
    static const char* paths[] = {"/health", "/v1/models", "/metrics", "/v1/resources"};
    const char* path = paths[rng() % 4];
    const int status = http(port, "GET", path, "", [](const std::string&) {});
    tally.add(status == 200 ? "control read ok" : std::string("control read ") + path + " " + std::to_string(status), status == 200);
  } else if (pick < 74) {
    resumed(port, i, n, tally);
  } else {
    api(port, i, n, rng, tally);
  }
}

}  // namespace reclaim::bench
