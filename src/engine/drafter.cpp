#include "engine/drafter.h"

#include <algorithm>
#include <cstring>

#include "engine/model.h"
#include "engine/sampling.h"
#include "engine/session.h"

namespace reclaim {

namespace {

// llama-server's checks (common_speculative_are_compatible): a guess is a
// token id, so the two vocabularies must give the same ids the same text.
void check_same_vocabulary(const std::string& path, const llama_vocab* target, const llama_vocab* draft) {
  const auto refuse = [&](const std::string& why) {
    throw InvalidModelFile("draft model '" + path + "' cannot guess for this model: " + why);
  };
  if (llama_vocab_type(target) != llama_vocab_type(draft)) refuse("its vocabulary is of another type");
  if (llama_vocab_get_add_bos(target) != llama_vocab_get_add_bos(draft) ||
      (llama_vocab_get_add_bos(target) && llama_vocab_bos(target) != llama_vocab_bos(draft))) {
    refuse("its beginning-of-text token is another");
  }
  if (llama_vocab_get_add_eos(target) != llama_vocab_get_add_eos(draft) ||
      (llama_vocab_get_add_eos(target) && llama_vocab_eos(target) != llama_vocab_eos(draft))) {
    refuse("its end-of-text token is another");
  }
  const int32_t nt = llama_vocab_n_tokens(target), nd = llama_vocab_n_tokens(draft);
  if (std::abs(nt - nd) > 128) {
    refuse("its vocabulary has " + std::to_string(nd) + " tokens where the model's has " + std::to_string(nt));
  }
  // Models without a tokenizer (token ids only) have no texts to compare:
  // llama.cpp asserts on asking.
  if (llama_vocab_type(target) == LLAMA_VOCAB_TYPE_NONE) {
    if (nt != nd) refuse("its " + std::to_string(nd) + " token ids are not the model's " + std::to_string(nt));
    return;
  }
  // From id 5, as llama-server: the first few are control tokens that
  // models of one family name differently.
  for (int32_t i = 5; i < std::min(nt, nd); ++i) {
    const char* a = llama_vocab_get_text(target, i);
    const char* b = llama_vocab_get_text(draft, i);
    if ((a == nullptr) != (b == nullptr) || (a && std::strcmp(a, b) != 0)) {
      refuse("token " + std::to_string(i) + " is another text in its vocabulary");
    }
  }
}

}  // namespace

llama_context_params draft_context_params(int32_t n_seq, int32_t n_ctx_seq, int32_t n_batch, int32_t max_threads) {
  SessionOptions so;
  so.n_ctx = n_ctx_seq;
  so.n_batch = n_batch;
  llama_context_params cp = session_context_params(so, 0, max_threads);
  cp.n_ctx = static_cast<uint32_t>(n_ctx_seq * n_seq);
  cp.n_seq_max = static_cast<uint32_t>(n_seq);
  cp.n_outputs_max = static_cast<uint32_t>(n_seq);
  cp.kv_unified = false;
  return cp;
}

Drafter::Drafter(Model& target, const std::string& path, int32_t n_seq, int32_t n_ctx_seq, int32_t n_batch)
    : scope_(target.scope(), "draft", ScopeOptions{.release_heap_on_close = true}) {
  ModelLoad load;
  load.path = path;
  load.mode = target.mode();
  load.n_gpu_layers = target.n_gpu_layers();
  model_ = load_model(scope_, load, nullptr);
  check_same_vocabulary(path, target.vocab(), llama_model_get_vocab(model_.get()));
  n_vocab_ = std::min(llama_vocab_n_tokens(target.vocab()), llama_vocab_n_tokens(llama_model_get_vocab(model_.get())));
  const llama_context_params cp = draft_context_params(n_seq, n_ctx_seq, n_batch, target.n_threads());
  ctx_ = new_context(scope_, model_.get(), cp, target.threadpool());
  n_batch_ = static_cast<int32_t>(cp.n_batch);
  batch_ = new_batch(scope_, n_batch_, 1);
  cells_.resize(static_cast<size_t>(n_seq));
  row_.reserve(static_cast<size_t>(n_seq));
}

Drafter::~Drafter() { scope_.close(); }

void Drafter::forget(int32_t seq) {
  cells_[static_cast<size_t>(seq)].clear();
  llama_memory_seq_rm(llama_get_memory(ctx_.get()), seq, -1, -1);
}

int32_t Drafter::level(int32_t seq, const std::vector<llama_token>& history) {
  std::vector<llama_token>& have = cells_[static_cast<size_t>(seq)];
  size_t same = 0;
  const size_t most = std::min(have.size(), history.size());
  while (same < most && have[same] == history[same]) ++same;
  if (same < have.size()) {
    if (!llama_memory_seq_rm(llama_get_memory(ctx_.get()), seq, static_cast<llama_pos>(same), -1)) {
      // A memory that cannot be cut (not a draft model worth the name):
      // start the sequence again.
      llama_memory_seq_rm(llama_get_memory(ctx_.get()), seq, -1, -1);
      same = 0;
    }
    have.resize(same);
  }
  return static_cast<int32_t>(same);
}

llama_token Drafter::pick(int32_t row) const {
  const float* logits = llama_get_logits_ith(ctx_.get(), row);
  if (!logits) throw Error("llama.cpp returned no logits for the draft's batch row " + std::to_string(row));
  return argmax(logits, n_vocab_);
}

bool Drafter::guess(std::vector<Ask>& asks, const Decode& decode) {
  llama_batch& b = *batch_.get();
  auto add = [&b](llama_token t, int32_t pos, int32_t seq, bool logits) { batch_add(b, t, pos, seq, logits); };
  // An aborted decode (the model unloads, or every request in the step is
  // leaving) may have written some of its cells: the sequences start again
  // at their next guess.
  auto run = [&] {
    const int32_t rc = decode(ctx_.get(), b);
    if (rc == 2) {
      for (Ask& q : asks) forget(q.seq);
      return false;
    }
    if (rc != 0) {
      throw Error("the draft model's decode failed (code " + std::to_string(rc) + ") at a batch of " +
                  std::to_string(b.n_tokens) + " tokens");
    }
    return true;
  };
  // Level each sequence's cells with the target's history and decode what
  // it lacks of it (the whole prompt at a request's first guess), batch by
  // batch; then the sequences' next tokens together, whose logits give each
  // its first guess.
  b.n_tokens = 0;
  for (Ask& q : asks) {
    q.guess->clear();
    const std::vector<llama_token>& history = *q.history;
    std::vector<llama_token>& have = cells_[static_cast<size_t>(q.seq)];
    for (int32_t pos = level(q.seq, history); pos < static_cast<int32_t>(history.size()); ++pos) {
      if (b.n_tokens == n_batch_) {
        if (!run()) return false;
        b.n_tokens = 0;
      }
      add(history[static_cast<size_t>(pos)], pos, q.seq, false);
      have.push_back(history[static_cast<size_t>(pos)]);
    }
  }
  if (b.n_tokens > 0 && !run()) return false;
  b.n_tokens = 0;
  row_.assign(asks.size(), -1);
  for (size_t a = 0; a < asks.size(); ++a) {
    std::vector<llama_token>& have = cells_[static_cast<size_t>(asks[a].seq)];
    row_[a] = b.n_tokens;
    add(asks[a].next, static_cast<int32_t>(have.size()), asks[a].seq, true);
    have.push_back(asks[a].next);
  }
  if (!run()) return false;
  // Then a token a step, every sequence still guessing in the same batch.
  for (;;) {
    b.n_tokens = 0;
    for (size_t a = 0; a < asks.size(); ++a) {
      Ask& q = asks[a];
      if (row_[a] < 0) continue;
      const llama_token t = pick(row_[a]);
      q.guess->push_back(t);
      row_[a] = -1;
      if (static_cast<int32_t>(q.guess->size()) >= q.n_max) continue;
      std::vector<llama_token>& have = cells_[static_cast<size_t>(q.seq)];
      row_[a] = b.n_tokens;
      add(t, static_cast<int32_t>(have.size()), q.seq, true);
      have.push_back(t);
    }
    if (b.n_tokens == 0) return true;
    if (!run()) return false;
  }
}

}  // namespace reclaim
