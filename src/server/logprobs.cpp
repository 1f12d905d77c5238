#include "server/logprobs.h"

#include <cmath>

#include "engine/text_stream.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// A token's text may be part of a character: its bytes say what it is, its
// text (valid UTF-8, as JSON must be) shows U+FFFD for the part.
json token_json(const llama_vocab* vocab, llama_token t, float logprob) {
  const std::string piece = token_piece(vocab, t);
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(c);
  return {{"token", valid_utf8(piece)}, {"logprob", logprob}, {"bytes", bytes}};
}

}  // namespace

json chat_logprobs_json(const llama_vocab* vocab, const std::vector<TokenLogprob>& entries) {
  json content = json::array();
  for (const TokenLogprob& e : entries) {
    json item = token_json(vocab, e.token, e.logprob);
    json top = json::array();
    for (const auto& [t, lp] : e.top) top.push_back(token_json(vocab, t, lp));
    item["top_logprobs"] = top;
    content.push_back(std::move(item));
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json native_probs_json(const llama_vocab* vocab, const std::vector<TokenLogprob>& entries, bool post_sampling) {
  // llama-server names the chain's probabilities as such, not as logs.
  auto one = [&](llama_token t, float lp) {
    json j = token_json(vocab, t, lp);
    if (post_sampling) {
      j.erase("logprob");
      j["prob"] = std::exp(lp);
    }
    j["id"] = t;
    return j;
  };
  json out = json::array();
  for (const TokenLogprob& e : entries) {
    json item = one(e.token, e.logprob);
    json top = json::array();
    for (const auto& [t, lp] : e.top) top.push_back(one(t, lp));
    item[post_sampling ? "top_probs" : "top_logprobs"] = top;
    out.push_back(std::move(item));
  }
  return out;
}

json completion_logprobs_json(const llama_vocab* vocab, const std::vector<TokenLogprob>& entries, size_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  for (const TokenLogprob& e : entries) {
    const std::string piece = token_piece(vocab, e.token);
    tokens.push_back(valid_utf8(piece));
    token_logprobs.push_back(e.logprob);
    json top = json::object();
    for (const auto& [t, lp] : e.top) top[valid_utf8(token_piece(vocab, t))] = lp;
    top_logprobs.push_back(top);
    text_offset.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", text_offset}};
}

}  // namespace reclaim::server
