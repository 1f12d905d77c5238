// The generation loop of one request on a Session: tokenize, decode the
// prompt in batches, sample, stream text, stop. Everything it allocates lives
// in the session's scope; the sampler chain is released when it returns.
#pragma once

#include <cstdint>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <llama.h>

#include "core/cancel.h"
#include "core/error.h"
#include "engine/sampling.h"
#include "engine/session.h"

namespace reclaim {

class ImagePrompt;

struct GenerateRequest {
  std::string prompt;        // special tokens in it (<|im_start|>, ...) are parsed
  std::vector<llama_token> prompt_tokens;  // if not empty: the prompt, already tokenized
  int32_t max_tokens = 128;  // < 0: until the context is full
  std::vector<std::string> stop;
  SamplingParams sampling;
  bool add_special = true;   // BOS/EOS as the model's vocab asks for
  // Image files' bytes, one for each image_marker() in `prompt`, in order
  // (engine/image_prompt.h); on a batch, for a model with a projector.
  std::vector<std::string> images;
  // Or the prompt with its images already prepared by the caller, on a scope
  // of the caller's that outlives the request; `prompt` and `images` are
  // then not read.
  std::shared_ptr<const ImagePrompt> image_prompt;
  // On a batch (engine/prompt_cache.h): start from the cells of an earlier
  // request that share a prefix with the prompt, and leave this one's for a
  // later one. False: neither.
  bool cache_prompt = true;
  GrammarSpec grammar;
  // Special tokens that stream as their text (a template's tool-call
  // markers), where other special tokens render as nothing.
  std::vector<llama_token> preserved_tokens;
  // -1: none; 0..kMaxTopLogprobs: each generated token's log-probability,
  // and that many of the likeliest tokens beside it (OpenAI's logprobs).
  int32_t logprobs = -1;
  // llama-server's post_sampling_probs: the probabilities are those the
  // sampler chain drew from (after top-k, top-p, min-p and temperature),
  // not the model's; the top tokens are the chain's candidates, none of
  // probability 0.
  bool post_sampling = false;
  // How long the grammar may take to weigh the vocabulary for one token
  // (GrammarTooCostly beyond); kGrammarTokenTime by default.
  std::chrono::milliseconds grammar_token_time{5000};
};
inline constexpr int32_t kMaxTopLogprobs = 20;

// A generated token's log-probability under the model (the softmax of its
// logits, before any sampler; or the chain's, with post_sampling), with the
// likeliest tokens at that step.
struct TokenLogprob {
  llama_token token = -1;
  float logprob = 0;
  std::vector<std::pair<llama_token, float>> top;  // likeliest first
};

enum class FinishReason { eos, stop, length, context, cancelled };
// "eos" (end-of-generation token), "stop" (a stop string), "length" (max
// tokens), "context" (the context is full), "cancelled".
inline const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::context: return "context";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

struct Timings {
  int32_t prompt_tokens = 0, generated_tokens = 0;
  int32_t cached_tokens = 0;  // of the prompt's, found in the prompt cache and not decoded
  double prompt_ms = 0;       // decoding the prompt
  double generate_ms = 0;     // from the end of the prompt to the last token
  // The tokens sampled in generate_ms: each after the first, one a decode
  // but for those a speculative step's guesses gave.
  int32_t generate_decodes = 0;
  // Speculative decoding: the guessed tokens decoded, and those the model
  // picked itself (llama-server's draft_n, draft_n_accepted).
  int32_t draft_tokens = 0, draft_accepted = 0;
  double first_token_ms = 0;  // from the start of the request to the first token
  double total_ms = 0;
  // Over what prompt_ms and generate_ms hold: the prompt's tokens that were
  // decoded (not those the prompt cache gave), and the generation's decodes.
  double prompt_per_second() const {
    return prompt_ms > 0 ? (prompt_tokens - cached_tokens) * 1000.0 / prompt_ms : 0;
  }
  double generate_per_second() const { return generate_ms > 0 ? generate_decodes * 1000.0 / generate_ms : 0; }
};

struct GenerateResult {
  std::string text;                 // what was streamed, valid UTF-8
  std::vector<llama_token> tokens;  // generated tokens; an end token is not included
  FinishReason finish = FinishReason::length;
  CancelReason cancel_reason = CancelReason::none;
  std::string stop;                 // the stop string that ended it
  uint32_t seed = 0;                // the seed used (for sampled generation)
  Timings timings;
  std::vector<TokenLogprob> logprobs;  // one a token of `tokens`, when asked for
};

// How far a prompt's decode has come, as llama-server's prompt_progress
// tells it: its tokens, those the prompt cache gave, those in the context so
// far (the cached ones first), and the milliseconds since its sequence
// began (0 at the first report, before any batch).
struct PromptProgress {
  int32_t total = 0, cached = 0, processed = 0;
  double ms = 0;
};

struct GenerateHooks {
  std::function<void(std::string_view)> on_text;  // each piece of text as it becomes safe to emit
  // Called on the request's own thread once new tokens were generated, with
  // how many there are so far, whether or not they made text (a model with
  // no tokenizer makes none).
  std::function<void(int32_t generated)> on_tokens;
  // The logprobs of the tokens generated since the last call, before the
  // text they made (when the request asked for them).
  std::function<void(std::vector<TokenLogprob>)> on_logprobs;
  // Once the request has its sequence (processed == cached), then after
  // each batch of its prompt, on the request's own thread, every report.
  std::function<void(const PromptProgress&)> on_prompt_progress;
  // Before on_text, the request's timings so far (llama-server's
  // timings_per_token).
  std::function<void(const Timings&)> on_timings;
  // Called before each llama_decode: `step` counts decodes from 0; `prompt`
  // is true while the prompt is being decoded. For tests and the audit.
  std::function<void(int step, bool prompt)> before_decode;
  // Called on the request's own thread before each decode (a session) or at
  // least every kTickInterval while it waits on a batch (engine/batcher.h),
  // even when no text comes: a server checks there that its client is still
  // there, and cancels the request's token if not.
  std::function<void()> tick;
};
inline constexpr std::chrono::milliseconds kTickInterval{100};

// Prompt plus requested tokens do not fit the context of `n_ctx` positions.
class ContextOverflow : public Error {
 public:
  ContextOverflow(const std::string& what, int32_t n_prompt, int32_t n_ctx) : Error(what), n_prompt_(n_prompt), n_ctx_(n_ctx) {}
  int32_t n_prompt() const { return n_prompt_; }
  int32_t n_ctx() const { return n_ctx_; }

 private:
  int32_t n_prompt_ = 0, n_ctx_ = 0;
};

// A prompt the model cannot take: empty, or with a token id outside its
// vocabulary, or text for a model without a tokenizer (NoTokenizer).
class BadPrompt : public Error {
 public:
  using Error::Error;
};
class NoTokenizer : public BadPrompt {
 public:
  using BadPrompt::BadPrompt;
};

// A grammar that took longer than GenerateRequest::grammar_token_time to
// weigh the vocabulary for one token: the client's grammar is too costly for
// this model (a 400 naming `grammar`).
class GrammarTooCostly : public Error {
 public:
  using Error::Error;
};

// A grammar that allows no token of the model's vocabulary after the text
// it has accepted (one that asks for a NUL, say): it cannot be completed
// with this model (a 400 naming `grammar`). Sampling on would hand the
// grammar a token it refused, and llama.cpp aborts the process where that
// token ends the text.
class GrammarDeadEnd : public Error {
 public:
  using Error::Error;
};

// False for a model without a tokenizer (llama.cpp's no_vocab): it takes and
// gives token ids only, and llama.cpp asserts on any text operation.
bool has_tokenizer(const llama_vocab* vocab);
// Throws BadPrompt unless every id is in the vocabulary.
void check_token_ids(const llama_vocab* vocab, const std::vector<llama_token>& tokens);

GenerateResult generate(Session& session, const GenerateRequest& request, const GenerateHooks& hooks = {});

// Throws ContextOverflow when a prompt of `n_prompt` tokens with up to
// `max_tokens` generated (< 0: no limit) cannot run in `n_ctx` positions. The
// last generated token is sampled but never decoded, so a request needs
// n_prompt + max_tokens - 1 positions.
void check_context_fits(int32_t n_prompt, int32_t max_tokens, int32_t n_ctx);

// Throws NoTokenizer for a model without one.
std::vector<llama_token> tokenize(const llama_vocab* vocab, std::string_view text, bool add_special,
                                  bool parse_special = true);
// The bytes of one token as text (special tokens render as nothing unless
// `special`; every token of a model without a tokenizer is empty).
std::string token_piece(const llama_vocab* vocab, llama_token token, bool special = false);

}  // namespace reclaim
