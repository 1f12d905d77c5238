// Reranking: how relevant each document is to a query, by a model whose
// pooling is rank (a cross-encoder: Qwen3-Reranker, bge-reranker, jina's).
// Each (query, document) pair is one input of a pooled decode (engine/embed.h)
// in the request's own context; its score is the classifier's first output.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <llama.h>

#include "core/cancel.h"
#include "engine/model.h"

namespace reclaim {

struct RerankResult {
  std::vector<float> scores;         // one a document, in the order given
  std::vector<int32_t> pair_tokens;  // each pair's prompt length
  int32_t prompt_tokens = 0;
  bool cancelled = false;
};

bool is_reranker(const Model& model);

// The pair as the model reads it: its GGUF's "rerank" template with {query}
// and {document} filled in, or where it has none BOS, query, EOS/SEP, document,
// EOS as its vocabulary adds them (llama-server's layout, the BERT
// cross-encoders').
std::vector<llama_token> rerank_tokens(const Model& model, const std::string& query, const std::string& document);

// Throws BadPrompt for a model that is not a reranker, and what
// decode_pooled throws.
RerankResult rerank(Model& model, const std::vector<std::vector<llama_token>>& pairs, const CancelToken* cancel = nullptr,
                    const std::function<void()>& tick = {});

}  // namespace reclaim
