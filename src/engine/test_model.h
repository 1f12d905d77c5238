// Deterministic random-weight llama-architecture GGUF files for tests and
// benchmarks: the same options give the same bytes. They carry a real
// tokenizer (from the vocab GGUFs that ship in llama.cpp's models/ folder),
// so they load, tokenize and generate (noise) like any model.
#pragma once

#include <cstdint>
#include <string>

namespace reclaim {

// The tokens of a model without a tokenizer (vocab "none"), as many as
// llama.cpp's tests/test-llama-archs gives its models.
inline constexpr int64_t kNoVocabTokens = 128;

struct TestModelSpec {
  // "spm", "bpe", another of llama.cpp's models/ggml-vocab-NAME.gguf by its
  // NAME ("gpt-neox"), a path to a vocab GGUF, or "none": no tokenizer, only
  // token ids (llama.cpp's no_vocab), as llama.cpp's own small test models.
  std::string vocab = "bpe";
  std::string type = "f16";   // f32, f16 or q8_0
  int64_t size = 0;           // target file size in bytes; 0: use the shape below
  int64_t n_embd = 0, n_layer = 0, n_ff = 0;
  uint64_t seed = 1;
  int64_t n_ctx_train = 4096;
  // tokenizer.chat_template: Jinja text in place of the vocab file's (empty:
  // the vocab file's, if it has one).
  std::string chat_template;
  // Adds Qwen2.5-Coder's fill-in-the-middle tokens (<|fim_prefix|>, ...,
  // <|file_sep|>, as control tokens) to the vocabulary, which llama.cpp then
  // finds by their text: a code model for /infill. Not with vocab "none".
  bool fim = false;
  // A reranker as llama.cpp converts Qwen3-Reranker: the qwen3 architecture
  // (llama's blocks with q/k norms), rank pooling, a two-label classifier
  // head ("yes", "no") whose softmax's first value is a pair's score, and
  // the rerank prompt template that /rerank fills.
  bool reranker = false;
  // Parts, as llama.cpp's gguf-split writes a model too large for one file:
  // OUT-00001-of-0000N.gguf, ... (OUT without its ".gguf"). 1: one file.
  int split = 1;
  // Layers from this one on add nothing to the residual stream: their output
  // projections (attn_output, ffn_down) are zeros, so that the model's
  // logits are those of the same seed and shape with this many layers. A
  // speculative decoding target whose draft (--layers N, the same seed) is
  // always right. -1: every layer random.
  int64_t zero_layers_from = -1;
};

struct TestModelShape {
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0;
  int64_t bytes = 0;  // tensor data
};

// The vocab GGUF that `vocab` names: "spm" and "bpe" are looked up in
// RECLAIM_VOCAB_DIR, else the llama.cpp models/ folder this build was set up
// with; "none" names no file (empty).
std::string vocab_file(const std::string& vocab);
// A chat template from llama.cpp's models/templates/ folder (e.g.
// "Qwen-Qwen2.5-7B-Instruct"): its text, or "" when there is no such file.
std::string llama_template(const std::string& name);

// Shape that a spec resolves to (reads the vocab size from the vocab file).
TestModelShape test_model_shape(const TestModelSpec& spec);

// Writes the model to `out`, or its parts beside it (each via a temporary
// file, renamed at the end, so an interrupted write never leaves a truncated
// model under that name).
TestModelShape make_test_model(const TestModelSpec& spec, const std::string& out);

// The model `reclaim audit` and `reclaim run` use when none is given: a
// ~300 MiB f16 model with the qwen2 bpe vocab, made once in the cache.
std::string default_test_model();
std::string cache_dir();

}  // namespace reclaim
