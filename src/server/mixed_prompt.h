// llama-server's prompts: a string, token ids, or both in one array; and a
// list of them where an endpoint takes several (embeddings).
#pragma once

#include <vector>

#include <llama.h>
#include <nlohmann/json.hpp>

namespace reclaim::server {

// A token id as JSON has it, or a 400 naming `field`.
llama_token token_id(const nlohmann::json& t, const char* field);

// One prompt: a string, or an array of strings and token ids, each string
// tokenized apart (special tokens in it parsed when `parse_special`);
// `add_special` adds the model's BOS and EOS around the first string only.
// A 400 naming `field` for any other shape or an id outside the vocabulary.
std::vector<llama_token> mixed_prompt_tokens(const llama_vocab* vocab, const nlohmann::json& prompt, const char* field,
                                             bool add_special, bool parse_special);

// Whether `input` is one prompt or a list of them, as llama-server reads it:
// a string, or an array of token ids with or without strings among them, is
// one; an array of strings, or of arrays, is a list.
bool is_one_prompt(const nlohmann::json& input);

}  // namespace reclaim::server
