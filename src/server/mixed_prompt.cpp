#include "server/mixed_prompt.h"

#include <algorithm>
#include <string>

#include "engine/generate.h"
#include "server/openai.h"

namespace reclaim::server {

using nlohmann::json;

llama_token token_id(const json& t, const char* field) {
  if (!t.is_number_integer() || (t.is_number_unsigned() ? t.get<uint64_t>() > INT32_MAX : t.get<int64_t>() < INT32_MIN)) {
    bad_field(field, std::string("'") + field + "' has " + t.dump() + ", which is no token id", "invalid_prompt");
  }
  return static_cast<llama_token>(t.get<int64_t>());
}

std::vector<llama_token> mixed_prompt_tokens(const llama_vocab* vocab, const json& prompt, const char* field,
                                             bool add_special, bool parse_special) {
  if (prompt.is_string()) return tokenize(vocab, prompt.get<std::string>(), add_special, parse_special);
  if (!prompt.is_array()) bad_field(field, std::string("'") + field + "' must be a string, or an array of strings and token ids");
  std::vector<llama_token> out;
  bool first = true;
  for (const json& part : prompt) {
    if (part.is_string()) {
      const std::vector<llama_token> t = tokenize(vocab, part.get<std::string>(), add_special && first, parse_special);
      out.insert(out.end(), t.begin(), t.end());
      first = false;
    } else {
      out.push_back(token_id(part, field));
    }
  }
  check_token_ids(vocab, out);
  return out;
}

bool is_one_prompt(const json& input) {
  if (input.is_string()) return true;
  if (!input.is_array() || input.empty()) return false;
  const bool flat = std::all_of(input.begin(), input.end(), [](const json& e) { return e.is_string() || e.is_number(); });
  const bool has_id = std::any_of(input.begin(), input.end(), [](const json& e) { return e.is_number(); });
  return flat && has_id;
}

}  // namespace reclaim::server
