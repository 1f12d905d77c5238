// What the server answers, judged by the promise between a request alone and
// beside others (engine/parity.h). Apart from served.h: it needs llama.h.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/parity.h"

namespace reclaim::testing {

using nlohmann::json;

// OpenAI chat answers as the promise of engine/parity.h judges them: each
// token known by its bytes, with the log-probabilities the server gave it
// (the request asks for "logprobs": true, "top_logprobs": kParityLogprobs).
class Answers {
 public:
  // Adds one response's or one chunk's choice to `r`.
  void add(const json& choice, reclaim::GenerateResult& r) {
    const json& part = choice.contains("delta") ? choice["delta"] : choice["message"];
    if (part.contains("content") && part["content"].is_string()) r.text += part["content"].get<std::string>();
    if (choice.contains("logprobs") && choice["logprobs"].is_object()) {
      for (const json& item : choice["logprobs"]["content"]) {
        reclaim::TokenLogprob lp{id(item), item["logprob"].get<float>(), {}};
        for (const json& t : item["top_logprobs"]) lp.top.emplace_back(id(t), t["logprob"].get<float>());
        r.tokens.push_back(lp.token);
        r.logprobs.push_back(std::move(lp));
      }
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      r.finish = choice["finish_reason"] == "stop" ? reclaim::FinishReason::eos : reclaim::FinishReason::length;
    }
  }

 private:
  llama_token id(const json& token) {
    const std::string bytes = token["bytes"].dump();
    return ids_.emplace(bytes, static_cast<llama_token>(ids_.size())).first->second;
  }
  std::map<std::string, llama_token> ids_;
};

// An answer judged against the same request's answer alone.
inline void expect_as_alone(const reclaim::GenerateResult& alone, const reclaim::GenerateResult& got,
                            const std::string& what) {
  ASSERT_FALSE(got.tokens.empty()) << what << ": " << got.text;
  const reclaim::Parity p = reclaim::compare_runs(alone, got);
  EXPECT_TRUE(p.holds) << what << ": " << p.why;
  if (p.parted_at < 0) EXPECT_EQ(got.text, alone.text) << what;
}

}  // namespace reclaim::testing
