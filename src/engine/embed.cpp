#include "engine/embed.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "engine/batcher.h"
#include "engine/core_turns.h"
#include "engine/generate.h"
#include "engine/session.h"

namespace reclaim {

enum llama_pooling_type embedding_pooling(const Model& model) {
  if (model.pooling()) return *model.pooling();
  char arch[64] = {0};
  if (llama_model_meta_val_str(model.get(), "general.architecture", arch, sizeof arch) < 0) return LLAMA_POOLING_TYPE_MEAN;
  char pooling[16] = {0};
  const std::string key = std::string(arch) + ".pooling_type";
  if (llama_model_meta_val_str(model.get(), key.c_str(), pooling, sizeof pooling) < 0) return LLAMA_POOLING_TYPE_MEAN;
  const int p = std::atoi(pooling);
  return p > 0 ? static_cast<enum llama_pooling_type>(p) : LLAMA_POOLING_TYPE_MEAN;
}

std::optional<enum llama_pooling_type> pooling_from_name(const std::string& name) {
  if (name == "none") return LLAMA_POOLING_TYPE_NONE;
  if (name == "mean") return LLAMA_POOLING_TYPE_MEAN;
  if (name == "cls") return LLAMA_POOLING_TYPE_CLS;
  if (name == "last") return LLAMA_POOLING_TYPE_LAST;
  if (name == "rank") return LLAMA_POOLING_TYPE_RANK;
  return std::nullopt;
}

// As llama-server holds an input to its slot's context. A model without a
// batch (a test's, the command line's) takes its training context.
size_t pooled_input_limit(Model& model) {
  size_t n_ctx = static_cast<size_t>(std::max<int64_t>(0, model.info().n_ctx_train));
  if (const Batcher* b = model.batcher()) {
    const auto seq = static_cast<size_t>(b->n_ctx_seq());
    n_ctx = n_ctx > 0 ? std::min(n_ctx, seq) : seq;
  }
  return n_ctx;
}

void check_pooled_length(Model& model, size_t tokens, const std::string& what) {
  const size_t n_ctx = pooled_input_limit(model);
  if (n_ctx == 0 || tokens <= n_ctx) return;
  throw ContextOverflow(what + " is " + std::to_string(tokens) + " tokens, longer than the model's context of " +
                            std::to_string(n_ctx) + " (a sequence of its batch)",
                        static_cast<int32_t>(std::min<size_t>(tokens, INT32_MAX)), static_cast<int32_t>(n_ctx));
}

bool decode_pooled(Model& model, const std::vector<std::vector<llama_token>>& inputs, enum llama_pooling_type pooling,
                   const CancelToken* cancel, const std::function<void()>& tick,
                   const std::function<void(size_t index, const float* out)>& take) {
  size_t longest = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) throw BadPrompt("input " + std::to_string(i) + " is empty (no tokens)");
    check_token_ids(model.vocab(), inputs[i]);
    longest = std::max(longest, inputs[i].size());
  }
  if (inputs.empty()) throw BadPrompt("no input");
  check_pooled_length(model, longest, "an input");
  // The whole of an input in one batch: pooling reads every output of it.
  SessionOptions o;
  o.n_ctx = static_cast<int32_t>(longest);
  o.n_batch = static_cast<int32_t>(longest);
  o.embeddings = true;
  o.pooling = pooling;
  Session s(model, o, cancel);
  llama_context* ctx = s.context();
  for (size_t n = 0; n < inputs.size(); ++n) {
    const std::vector<llama_token>& in = inputs[n];
    if (tick) tick();
    if (s.cancelled()) return false;
    llama_batch& b = s.batch();
    b.n_tokens = static_cast<int32_t>(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      b.token[i] = in[i];
      b.pos[i] = static_cast<llama_pos>(i);
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = true;
    }
    llama_memory_clear(llama_get_memory(ctx), true);
    int32_t rc;
    {
      DecodeTurn turn(model);  // its pool one graph at a time, the cores in turns
      rc = llama_decode(ctx, b);
    }
    if (rc == 2 || s.cancelled()) return false;
    if (rc != 0) throw Error("llama_decode failed (" + std::to_string(rc) + ") on input " + std::to_string(n));
    const float* e = llama_get_embeddings_seq(ctx, 0);
    if (!e) throw Error("llama.cpp returned no pooled output");
    take(n, e);
  }
  return true;
}

EmbedResult embed(Model& model, const std::vector<std::vector<llama_token>>& inputs, const CancelToken* cancel,
                  const std::function<void()>& tick) {
  const enum llama_pooling_type pooling = embedding_pooling(model);
  if (pooling == LLAMA_POOLING_TYPE_RANK) throw BadPrompt("the model is a reranker: its pooling gives scores, not embeddings");
  if (pooling == LLAMA_POOLING_TYPE_NONE) {
    throw BadPrompt("the model's pooling is none: it makes a vector for each token, where an embedding is one for the whole "
                    "input (serve it with mean, cls or last: pooling in --config, or --pooling)");
  }
  EmbedResult out;
  const int32_t n_embd = llama_model_n_embd(model.get());
  const bool done = decode_pooled(model, inputs, pooling, cancel, tick, [&](size_t n, const float* e) {
    double norm = 0;
    for (int32_t k = 0; k < n_embd; ++k) norm += static_cast<double>(e[k]) * e[k];
    const float scale = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
    std::vector<float> v(static_cast<size_t>(n_embd));
    for (int32_t k = 0; k < n_embd; ++k) v[static_cast<size_t>(k)] = e[k] * scale;
    out.vectors.push_back(std::move(v));
    out.prompt_tokens += static_cast<int32_t>(inputs[n].size());
  });
  out.cancelled = !done;
  return out;
}

}  // namespace reclaim
