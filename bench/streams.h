// Streamed completions against a server and the prompts both servers of a
// benchmark get (bench/swap, bench/two_models).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "http_client.h"

namespace reclaim::bench {

struct StreamResult {
  double first_ms = -1;  // first token's text
  double total_ms = 0;
  int64_t tokens = 0;    // completion tokens, from the usage chunk
};

// A streamed /v1/completions; reads SSE events as they come.
inline StreamResult stream_completion(int port, const std::string& model, const std::string& prompt, int n,
                                      const std::function<void()>& on_first = {}) {
  const json req = {{"model", model},         {"prompt", prompt}, {"max_tokens", n}, {"temperature", 0},
                    {"stream", true},         {"stream_options", {{"include_usage", true}}}};
  StreamResult r;
  const Clock::time_point t0 = Clock::now();
  std::string all;
  const int status = post_sse(port, "/v1/completions", req.dump(), [&](const json& j) {
    if (j.contains("choices") && !j["choices"].empty() && r.first_ms < 0) {
      const json& c = j["choices"][0];
      if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) {
        r.first_ms = ms_since(t0);
        if (on_first) on_first();
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) r.tokens = j["usage"].value("completion_tokens", int64_t{0});
  }, all);
  r.total_ms = ms_since(t0);
  if (status != 200) throw Error("streamed completion of '" + model + "' -> " + std::to_string(status) + ": " + all.substr(0, 300));
  if (r.first_ms < 0) throw Error("the stream of '" + model + "' had no token: " + all.substr(0, 300));
  return r;
}

// llama-server's output parser fails a request whose text is not valid UTF-8
// (HTTP 500, llama.cpp issue #27543), and random-weight models emit broken
// byte tokens now and then. Greedy output is fixed by the prompt, so each
// prompt is chosen once, on reclaim, among variants of `base` as the first
// whose n tokens are clean text; both servers then get the same prompts.
class Prompts {
 public:
  explicit Prompts(int port) : port_(port) {}
  const std::string& get(const std::string& model, const std::string& base, int n) {
    const std::string key = model + "\n" + base + "\n" + std::to_string(n);
    auto it = chosen_.find(key);
    if (it != chosen_.end()) return it->second;
    if (frozen_) throw Error("prompt '" + base + "' was not chosen before timing");
    for (int k = 0; k < 64; ++k) {
      const std::string prompt = k == 0 ? base : base + " (" + std::to_string(k) + ")";
      const json r = http_json(port_, "POST", "/v1/completions",
                               {{"model", model}, {"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}});
      const std::string text = r["choices"][0].value("text", "");
      if (!text.empty() && text.find("\xEF\xBF\xBD") == std::string::npos) return chosen_[key] = prompt;
    }
    throw Error("no variant of the prompt '" + base + "' gives clean text on model '" + model + "'");
  }
  void freeze() { frozen_ = true; }

 private:
  bool frozen_ = false;
  int port_;
  std::map<std::string, std::string> chosen_;
};

}  // namespace reclaim::bench
