// Token log-probabilities in OpenAI's two shapes: chat's `logprobs.content`
// (token, logprob, bytes, top_logprobs) and the legacy completions' parallel
// arrays (tokens, token_logprobs, top_logprobs, text_offset).
#pragma once

#include <vector>

#include <llama.h>
#include <nlohmann/json.hpp>

#include "engine/generate.h"

namespace reclaim::server {

nlohmann::json chat_logprobs_json(const llama_vocab* vocab, const std::vector<TokenLogprob>& entries);
// `offset`: where the first entry's text starts in the reply's text.
nlohmann::json completion_logprobs_json(const llama_vocab* vocab, const std::vector<TokenLogprob>& entries,
                                        size_t offset = 0);
// llama-server's completion_probabilities: [{id, token, bytes, logprob,
// top_logprobs: [{id, token, bytes, logprob}]}].
// post_sampling: "prob" and "top_probs", the chain's (llama-server's
// post_sampling_probs).
nlohmann::json native_probs_json(const llama_vocab* vocab, const std::vector<TokenLogprob>& entries, bool post_sampling);

}  // namespace reclaim::server
