#include "server/infill.h"

#include <algorithm>

#include "engine/generate.h"
#include "server/mixed_prompt.h"
#include "server/openai.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

using Tokens = std::vector<llama_token>;

void append(Tokens& to, const Tokens& from) { to.insert(to.end(), from.begin(), from.end()); }

Tokens text_tokens(const llama_vocab* vocab, const std::string& text) { return tokenize(vocab, text, false, false); }

const json& required_part(const json& body, const char* field) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) bad_field(field, std::string("'") + field + "' is required");
  if (!it->is_string() && !it->is_array()) {
    bad_field(field, std::string("'") + field + "' must be a string, or an array of strings and token ids");
  }
  return *it;
}

}  // namespace

InfillInput parse_infill(const json& body) {
  InfillInput in;
  in.prefix = required_part(body, "input_prefix");
  in.suffix = required_part(body, "input_suffix");
  const auto extra = body.find("input_extra");
  if (extra == body.end() || extra->is_null()) return in;
  if (!extra->is_array()) bad_field("input_extra", "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
  for (size_t i = 0; i < extra->size(); ++i) {
    const json& chunk = (*extra)[i];
    const std::string at = "input_extra[" + std::to_string(i) + "]";
    if (!chunk.is_object() || !chunk.contains("text") || !chunk["text"].is_string()) {
      bad_field("input_extra", "'" + at + "' must have a \"text\" that is a string");
    }
    InfillChunk c;
    c.text = chunk["text"].get<std::string>();
    if (chunk.contains("filename")) {
      if (!chunk["filename"].is_string()) bad_field("input_extra", "'" + at + ".filename' must be a string");
      c.filename = chunk["filename"].get<std::string>();
    }
    in.extra.push_back(std::move(c));
  }
  return in;
}

bool has_fim_tokens(const llama_vocab* vocab, std::string* missing) {
  std::string m;
  if (llama_vocab_fim_pre(vocab) == LLAMA_TOKEN_NULL) m += (m.empty() ? "" : ", ") + std::string("prefix");
  if (llama_vocab_fim_suf(vocab) == LLAMA_TOKEN_NULL) m += (m.empty() ? "" : ", ") + std::string("suffix");
  if (llama_vocab_fim_mid(vocab) == LLAMA_TOKEN_NULL) m += (m.empty() ? "" : ", ") + std::string("middle");
  if (missing) *missing = m;
  return m.empty();
}

Tokens infill_prompt(const llama_vocab* vocab, const InfillInput& in, const Tokens& prompt, int32_t n_batch,
                     int32_t n_predict, int32_t n_ctx) {
  const llama_token rep = llama_vocab_fim_rep(vocab), sep = llama_vocab_fim_sep(vocab);
  // The other files, each under its name where the vocabulary has a file
  // separator, else after a plain separator line.
  Tokens extra;
  if (rep != LLAMA_TOKEN_NULL) {
    extra.push_back(rep);
    append(extra, text_tokens(vocab, "myproject\n"));
  }
  for (const InfillChunk& c : in.extra) {
    if (sep != LLAMA_TOKEN_NULL) {
      extra.push_back(sep);
      append(extra, text_tokens(vocab, c.filename + "\n"));
    } else {
      append(extra, text_tokens(vocab, "\n\n--- snippet ---\n\n"));
    }
    append(extra, text_tokens(vocab, c.text));
  }
  if (sep != LLAMA_TOKEN_NULL) {
    extra.push_back(sep);
    append(extra, text_tokens(vocab, "filename\n"));
  }

  Tokens prefix = mixed_prompt_tokens(vocab, in.prefix, "input_prefix", false, false);
  Tokens suffix = mixed_prompt_tokens(vocab, in.suffix, "input_suffix", false, false);
  // The nearest code counts most: the prefix's end and the suffix's start,
  // three quarters of a batch and what is left of the last quarter.
  const auto prefix_take = std::min<size_t>(prefix.size(), static_cast<size_t>(3 * (n_batch / 4)));
  const auto suffix_room = std::max<int64_t>(0, n_batch / 4 - (2 + static_cast<int64_t>(prompt.size())));
  const auto suffix_take = std::min<size_t>(suffix.size(), static_cast<size_t>(suffix_room));
  prefix.erase(prefix.begin(), prefix.end() - static_cast<std::ptrdiff_t>(prefix_take));
  suffix.resize(suffix_take);
  const int64_t reply = n_predict < 0 ? 0 : n_predict;
  const auto extra_room = std::max<int64_t>(0, static_cast<int64_t>(n_ctx) - n_batch - 2 * reply);
  const auto extra_take = std::min<size_t>(extra.size(), static_cast<size_t>(extra_room));

  Tokens out;
  if (llama_vocab_get_add_bos(vocab)) out.push_back(llama_vocab_bos(vocab));
  out.insert(out.end(), extra.end() - static_cast<std::ptrdiff_t>(extra_take), extra.end());
  out.push_back(llama_vocab_fim_pre(vocab));
  append(out, prefix);
  append(out, prompt);
  out.push_back(llama_vocab_fim_suf(vocab));
  append(out, suffix);
  out.push_back(llama_vocab_fim_mid(vocab));
  return out;
}

}  // namespace reclaim::server
