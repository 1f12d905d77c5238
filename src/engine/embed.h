// Embeddings: each input decoded in a context of the request's own, made
// with embeddings on and pooled into one vector (the model's pooling; mean
// for a model that has none, as a chat model's is), normalized to length 1
// as OpenAI's are. The context is a Session's, so it lives in the request's
// scope under the model's and is freed when the request ends, as a
// completion's is.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <llama.h>

#include "core/cancel.h"
#include "engine/model.h"

namespace reclaim {

struct EmbedResult {
  std::vector<std::vector<float>> vectors;  // one an input, in order
  int32_t prompt_tokens = 0;
  bool cancelled = false;
};

// The pooling a model's embeddings get: its own, or mean where it has none.
enum llama_pooling_type embedding_pooling(const Model& model);
// llama.cpp's pooling names (none, mean, cls, last, rank); nullopt for
// another.
std::optional<enum llama_pooling_type> pooling_from_name(const std::string& name);
inline constexpr const char* kPoolingNames = "none, mean, cls, last or rank";

// Inputs of one request at most (OpenAI's limit): each is decoded and its
// vector kept, and written out, until the request ends.
inline constexpr size_t kMaxEmbedInputs = 2048;

// The longest input decode_pooled takes: a sequence of the model's batch
// (--ctx, what its memory budget counted), at most its training context.
// The context made for the inputs is as long as the longest, and its
// attention's buffer grows with its square. 0: no bound known.
size_t pooled_input_limit(Model& model);
// Throws ContextOverflow where `tokens` of `what` ("an input", "the query")
// are over pooled_input_limit.
void check_pooled_length(Model& model, size_t tokens, const std::string& what);

// Each input decoded whole, in a context of its own made for `pooling`, and
// its pooled output (n_embd floats, or the classifier's labels under rank
// pooling) handed to `take` with the input's index. Checks the inputs first
// (BadPrompt, ContextOverflow as embed() says). False when cancelled.
bool decode_pooled(Model& model, const std::vector<std::vector<llama_token>>& inputs, enum llama_pooling_type pooling,
                   const CancelToken* cancel, const std::function<void()>& tick,
                   const std::function<void(size_t index, const float* out)>& take);

// Throws BadPrompt for an empty input or one outside the vocabulary, and
// ContextOverflow for one longer than the model's training context. `tick`
// runs before each input (a server looks at its client's socket there and
// cancels the token when it is gone).
EmbedResult embed(Model& model, const std::vector<std::vector<llama_token>>& inputs, const CancelToken* cancel = nullptr,
                  const std::function<void()>& tick = {});

}  // namespace reclaim
