// The prompt cache as a client of `reclaim serve` sees it: a chat's next
// turn reuses its history and says so in its usage, /metrics counts what came
// from the cache, the cache's bytes are on the ledger, and an unload takes
// them.
#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "served.h"
#include "served_parity.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

json turn(const json& messages, bool cache = true) {
  return {{"model", "bpe"},     {"messages", messages}, {"max_tokens", 8},
          {"temperature", 0},   {"cache_prompt", cache}, {"logprobs", true},
          {"top_logprobs", reclaim::kParityLogprobs}};
}

}  // namespace

TEST(ServePromptCache, AChatsNextTurnReusesItsHistoryAndSaysSo) {
  Served s;
  json messages = json::array({{{"role", "user"}, {"content", "Tell me about the rivers of the north."}}});
  json first = s.post_json("/v1/chat/completions", turn(messages));
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  messages.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  messages.push_back({{"role", "user"}, {"content", "And the mountains they come from?"}});
  const json second = s.post_json("/v1/chat/completions", turn(messages));
  const int prompt = second["usage"]["prompt_tokens"], cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
  // At least the first turn's prompt; never the whole of this one.
  EXPECT_GE(cached, first["usage"]["prompt_tokens"].get<int>()) << second.dump();
  EXPECT_LT(cached, prompt);

  auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(metric(m->body, "reclaim_prompt_tokens_total{source=\"cache\"}"), cached) << m->body;
  EXPECT_EQ(metric(m->body, "reclaim_prompt_tokens_total{source=\"decoded\"}"),
            first["usage"]["prompt_tokens"].get<int>() + prompt - cached);
  EXPECT_GT(metric(m->body, "reclaim_model_cached_tokens{model=\"bpe\"}"), prompt - 1);

  // The cells are on the ledger, under the model, with their bytes.
  const json r = s.get("/v1/resources");
  uint64_t bytes = 0;
  for (const json& e : r["ledger"]["entries"]) {
    if (e["owner"] == "registry/model:bpe/cache" && e["kind"] == "prompt_cache") bytes += e["bytes"].get<uint64_t>();
  }
  // (Under a sanitizer the context's entry, whose share this is, may read 0:
  // its bytes are the heap's growth, which mallinfo does not see there.)
  if (!sanitized()) EXPECT_GT(bytes, 0u) << r["ledger"].dump();

  // "cache_prompt": false reuses nothing, and leaves nothing behind.
  const json third = s.post_json("/v1/chat/completions", turn(messages, false));
  EXPECT_EQ(third["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The same answer as with the cache, but for a near tie (engine/parity.h).
  Answers answers;
  reclaim::GenerateResult with_cache, without;
  answers.add(second["choices"][0], with_cache);
  answers.add(third["choices"][0], without);
  expect_as_alone(without, with_cache, "the turn on the cache");
  s.expect_clean();
}
