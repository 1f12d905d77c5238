#include "engine/rerank.h"

#include <algorithm>

#include "engine/embed.h"
#include "engine/generate.h"

namespace reclaim {

namespace {

// The template with its {query} and {document} filled in, in one pass over
// the template: a field's own text is never searched for placeholders (a
// query of "{document}" repeated would otherwise multiply the document).
std::string fill(const std::string& tmpl, const std::string& query, const std::string& document) {
  static const std::string q = "{query}", d = "{document}";
  std::string out;
  size_t at = 0;
  while (at < tmpl.size()) {
    const size_t nq = tmpl.find(q, at), nd = tmpl.find(d, at);
    const size_t next = std::min(nq, nd);
    out.append(tmpl, at, next == std::string::npos ? std::string::npos : next - at);
    if (next == std::string::npos) break;
    out += next == nq ? query : document;
    at = next + (next == nq ? q.size() : d.size());
  }
  return out;
}

void append(std::vector<llama_token>& out, const std::vector<llama_token>& more) {
  out.insert(out.end(), more.begin(), more.end());
}

}  // namespace

bool is_reranker(const Model& model) { return embedding_pooling(model) == LLAMA_POOLING_TYPE_RANK; }

std::vector<llama_token> rerank_tokens(const Model& model, const std::string& query, const std::string& document) {
  const llama_vocab* vocab = model.vocab();
  if (const char* tmpl = llama_model_chat_template(model.get(), "rerank")) {
    // Filled in and tokenized whole, as the model's own reference code and
    // llama-server do: a field's first word merges with the text before it.
    return tokenize(vocab, fill(tmpl, query, document), false, true);
  }
  std::vector<llama_token> out;
  llama_token eos = llama_vocab_eos(vocab);
  if (eos == LLAMA_TOKEN_NULL) eos = llama_vocab_sep(vocab);
  if (llama_vocab_get_add_bos(vocab)) out.push_back(llama_vocab_bos(vocab));
  append(out, tokenize(vocab, query, false, false));
  if (llama_vocab_get_add_eos(vocab)) out.push_back(eos);
  if (llama_vocab_get_add_sep(vocab)) out.push_back(llama_vocab_sep(vocab));
  append(out, tokenize(vocab, document, false, false));
  if (llama_vocab_get_add_eos(vocab)) out.push_back(eos);
  return out;
}

RerankResult rerank(Model& model, const std::vector<std::vector<llama_token>>& pairs, const CancelToken* cancel,
                    const std::function<void()>& tick) {
  if (!is_reranker(model)) throw BadPrompt("the model is not a reranker: its pooling is not rank");
  RerankResult out;
  const bool done = decode_pooled(model, pairs, LLAMA_POOLING_TYPE_RANK, cancel, tick, [&](size_t n, const float* e) {
    out.scores.push_back(e[0]);
    out.pair_tokens.push_back(static_cast<int32_t>(pairs[n].size()));
    out.prompt_tokens += static_cast<int32_t>(pairs[n].size());
  });
  out.cancelled = !done;
  return out;
}

}  // namespace reclaim
