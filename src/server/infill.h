// llama-server's POST /infill: fill in the middle. The code before the cursor
// (input_prefix), after it (input_suffix), other files for context
// (input_extra) and the start of the middle (prompt) become one prompt in the
// model's fill-in-the-middle tokens, in the repository-level layout that
// llama-server uses (Qwen2.5-Coder's, arXiv 2409.12186):
//
//   [FIM_REP]myproject\n [FIM_SEP]file\n text ... [FIM_SEP]filename\n
//   [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]
//
// The prefix and the suffix are cut to fit a batch (3:1), the extra context to
// what the sequence has left after the batch and twice the reply, from its end.
#pragma once

#include <string>
#include <vector>

#include <llama.h>
#include <nlohmann/json.hpp>

namespace reclaim::server {

struct InfillChunk {
  std::string filename = "tmp";
  std::string text;
};

struct InfillInput {
  nlohmann::json prefix;  // a string, or llama-server's mixed array of strings and token ids
  nlohmann::json suffix;
  std::vector<InfillChunk> extra;
};

// The body's infill fields, or a 400 naming the field that is wrong.
InfillInput parse_infill(const nlohmann::json& body);

// Whether the vocabulary has the three tokens a fill needs (prefix, suffix,
// middle); `missing` names those it lacks.
bool has_fim_tokens(const llama_vocab* vocab, std::string* missing);

// The fill's prompt for `vocab`, whose FIM tokens the caller has checked.
// `prompt`: the middle's start, already tokenized; `n_batch`: tokens a step;
// `n_predict`: the reply's bound (< 0: none); `n_ctx`: the sequence's context.
std::vector<llama_token> infill_prompt(const llama_vocab* vocab, const InfillInput& in, const std::vector<llama_token>& prompt,
                                       int32_t n_batch, int32_t n_predict, int32_t n_ctx);

}  // namespace reclaim::server
