#include "engine/generate.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "core/ledger.h"
#include "engine/chat.h"
#include "engine/text_stream.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::small_model;

namespace {

constexpr int kThreads = 2;
const char* const kPrompt = "Once upon a time, in a land far away, there lived";

ModelLoad load_of(const std::string& path) {
  ModelLoad l;
  l.path = path;
  return l;
}

SessionOptions session_options(int n_ctx = 256) {
  SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = 128;
  o.n_threads = kThreads;
  return o;
}

GenerateRequest greedy(int max_tokens) {
  GenerateRequest r;
  r.prompt = kPrompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

// The reference: the plain llama.cpp C API, as its simple example does it.
std::vector<llama_token> reference_greedy(const std::string& path, int n_ctx, int n_predict) {
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(path.c_str(), mp);
  EXPECT_NE(model, nullptr);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(n_ctx);
  cp.n_batch = cp.n_ubatch = 128;
  cp.n_threads = cp.n_threads_batch = kThreads;
  llama_context* ctx = llama_init_from_model(model, cp);
  EXPECT_NE(ctx, nullptr);
  const int n = -llama_tokenize(vocab, kPrompt, static_cast<int32_t>(strlen(kPrompt)), nullptr, 0, true, true);
  std::vector<llama_token> prompt(static_cast<size_t>(n));
  llama_tokenize(vocab, kPrompt, static_cast<int32_t>(strlen(kPrompt)), prompt.data(), n, true, true);
  llama_sampler* smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(smpl, llama_sampler_init_greedy());
  llama_batch batch = llama_batch_get_one(prompt.data(), n);
  std::vector<llama_token> out;
  llama_token t;
  while (static_cast<int>(out.size()) < n_predict) {
    EXPECT_EQ(llama_decode(ctx, batch), 0);
    t = llama_sampler_sample(smpl, ctx, -1);
    if (llama_vocab_is_eog(vocab, t)) break;
    out.push_back(t);
    batch = llama_batch_get_one(&t, 1);
  }
  llama_sampler_free(smpl);
  llama_free(ctx);
  llama_model_free(model);
  return out;
}

class Generate : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Generate, GreedyEqualsTheReferenceLoopTokenForToken) {
  const std::string& path = small_model(GetParam());
  const std::vector<llama_token> want = reference_greedy(path, 256, 48);
  ASSERT_EQ(want.size(), 48u) << "the reference stopped early; pick another prompt";
  Model model(load_of(path));
  Session session(model, session_options());
  GenerateResult got = generate(session, greedy(48));
  EXPECT_EQ(got.tokens, want);
  EXPECT_EQ(got.finish, FinishReason::length);
  EXPECT_EQ(got.timings.generated_tokens, 48);
  EXPECT_GT(got.timings.prompt_tokens, 5);
  EXPECT_GT(got.timings.prompt_per_second(), 0);
  EXPECT_GT(got.timings.generate_per_second(), 0);
  EXPECT_GT(got.timings.first_token_ms, 0);
  EXPECT_LE(got.timings.first_token_ms, got.timings.total_ms);
}

TEST_P(Generate, StreamedTextIsValidUtf8AndEqualsTheResult) {
  Model model(load_of(small_model(GetParam())));
  Session session(model, session_options());
  std::string streamed;
  int pieces = 0;
  GenerateHooks hooks;
  hooks.on_text = [&](std::string_view t) {
    // Each piece on its own must be whole characters.
    EXPECT_EQ(valid_utf8(t), t);
    EXPECT_EQ(unfinished_utf8_tail(t), 0u);
    streamed += t;
    ++pieces;
  };
  GenerateResult r = generate(session, greedy(64), hooks);
  EXPECT_EQ(streamed, r.text);
  EXPECT_GT(pieces, 1);
}

TEST_P(Generate, SameSeedSameTokensOtherSeedOtherTokens) {
  Model model(load_of(small_model(GetParam())));
  auto sampled = [&](uint32_t seed) {
    Session session(model, session_options());
    GenerateRequest r = greedy(32);
    r.sampling = SamplingParams{};
    r.sampling.temperature = 1.5f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.repeat_penalty = 1.1f;
    r.sampling.seed = seed;
    GenerateResult g = generate(session, r);
    EXPECT_EQ(g.seed, seed);
    return g.tokens;
  };
  EXPECT_EQ(sampled(7), sampled(7));
  EXPECT_NE(sampled(7), sampled(8));
  EXPECT_NE(sampled(7), generate(*std::make_unique<Session>(model, session_options()), greedy(32)).tokens);
}

TEST_P(Generate, AStopStringEndsTheTextBeforeIt) {
  Model model(load_of(small_model(GetParam())));
  std::string full;
  std::vector<llama_token> tokens;
  {
    Session session(model, session_options());
    GenerateResult r = generate(session, greedy(40));
    full = r.text;
    tokens = r.tokens;
  }
  // A stop string made of the text of tokens 10..11, which may be split
  // across the two tokens' pieces.
  std::string stop;
  size_t at = std::string::npos;
  for (size_t i = 10; i + 1 < tokens.size() && at == std::string::npos; ++i) {
    std::string s = token_piece(model.vocab(), tokens[i]) + token_piece(model.vocab(), tokens[i + 1]);
    if (s.size() < 2 || valid_utf8(s) != s) continue;
    stop = s;
    at = full.find(stop);
  }
  ASSERT_NE(at, std::string::npos);
  Session session(model, session_options());
  GenerateRequest req = greedy(40);
  req.stop = {"never appears \x01", stop};
  GenerateResult r = generate(session, req);
  EXPECT_EQ(r.finish, FinishReason::stop);
  EXPECT_EQ(r.stop, stop);
  EXPECT_EQ(r.text, full.substr(0, at));
}

TEST_P(Generate, PromptPlusMaxTokensOverTheContextIsAClearError) {
  Model model(load_of(small_model(GetParam())));
  Session session(model, session_options(256));
  const int n_prompt = static_cast<int>(tokenize(model.vocab(), kPrompt, true).size());
  try {
    generate(session, greedy(256));
    FAIL() << "no error";
  } catch (const ContextOverflow& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(std::to_string(n_prompt) + " tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("context of 256"), std::string::npos) << msg;
  }
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " again";
  GenerateRequest req = greedy(4);
  req.prompt = long_prompt;
  EXPECT_THROW(generate(session, req), ContextOverflow);
  req.prompt = "";
  if (tokenize(model.vocab(), "", true).empty()) {
    EXPECT_THROW(generate(session, req), Error);  // no BOS in this vocab: nothing to decode
  } else {
    EXPECT_EQ(generate(session, req).tokens.size(), 4u);  // generates from BOS alone
  }
  // The session is still usable after those errors.
  EXPECT_EQ(generate(session, greedy(4)).tokens.size(), 4u);
}

TEST_P(Generate, MaxTokensThatExactlyFillTheContextFit) {
  Model model(load_of(small_model(GetParam())));
  Session session(model, session_options(64));
  const int n_prompt = static_cast<int>(tokenize(model.vocab(), kPrompt, true).size());
  // The last token is sampled, not decoded: it needs no position.
  const int fits = session.n_ctx() - n_prompt + 1;
  EXPECT_EQ(generate(session, greedy(fits)).tokens.size(), static_cast<size_t>(fits));
  EXPECT_THROW(generate(session, greedy(fits + 1)), ContextOverflow);
}

TEST_P(Generate, WithoutMaxTokensItRunsUntilTheContextIsFull) {
  Model model(load_of(small_model(GetParam())));
  Session session(model, session_options(64));
  GenerateResult r = generate(session, greedy(-1));
  ASSERT_EQ(r.finish, FinishReason::context);
  EXPECT_EQ(r.timings.prompt_tokens + static_cast<int>(r.tokens.size()), session.n_ctx() + 1);
}

TEST_P(Generate, CancelStopsBeforeTheNextDecodeStep) {
  Model model(load_of(small_model(GetParam())));
  CancelToken cancel;
  Session session(model, session_options(), &cancel);
  int decodes = 0;
  GenerateHooks hooks;
  hooks.before_decode = [&](int step, bool) {
    decodes = step + 1;
    if (step == 3) cancel.cancel(CancelReason::client_gone);
  };
  GenerateResult r = generate(session, greedy(40), hooks);
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  EXPECT_EQ(r.cancel_reason, CancelReason::client_gone);
  EXPECT_EQ(decodes, 4);
  // Step 0 is the prompt; a token is sampled before each later step.
  EXPECT_EQ(r.tokens.size(), 3u);
}

TEST_P(Generate, CancelDuringThePromptAbortsTheDecodeItself) {
  Model model(load_of(small_model(GetParam())));
  CancelToken cancel;
  Session session(model, session_options(), &cancel);
  // Set while no step boundary can see it: only llama.cpp's abort callback,
  // polled inside the graph, can stop this decode.
  std::vector<llama_token> prompt = tokenize(model.vocab(), kPrompt, true);
  llama_batch& b = session.batch();
  b.n_tokens = static_cast<int32_t>(prompt.size());
  for (int32_t i = 0; i < b.n_tokens; ++i) {
    b.token[i] = prompt[static_cast<size_t>(i)];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = i == b.n_tokens - 1;
  }
  cancel.cancel();
  EXPECT_EQ(llama_decode(session.context(), b), 2);  // 2: aborted
  // Through generate, a cancelled prompt ends with nothing generated.
  GenerateResult r = generate(session, greedy(8));
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  EXPECT_TRUE(r.tokens.empty());
}

TEST_P(Generate, AnExpiredDeadlineCancels) {
  Model model(load_of(small_model(GetParam())));
  CancelToken cancel;
  cancel.set_deadline(CancelToken::Clock::now() - std::chrono::seconds(1));
  Session session(model, session_options(), &cancel);
  GenerateResult r = generate(session, greedy(8));
  EXPECT_EQ(r.finish, FinishReason::cancelled);
  EXPECT_EQ(r.cancel_reason, CancelReason::deadline);
}

TEST_P(Generate, ASessionIsOnTheLedgerUnderItsModelUntilItEnds) {
  Ledger& ledger = Ledger::process();
  const uint64_t before = ledger.totals().count;
  Model model(load_of(small_model(GetParam())));
  EXPECT_EQ(ledger.totals().count, before + 2);  // the model and its threadpool
  {
    Session session(model, session_options());
    // context, batch
    EXPECT_EQ(ledger.totals().count, before + 4);
    for (const LedgerEntry& e : ledger.entries()) {
      if (e.kind == Kind::context) EXPECT_EQ(e.owner.rfind(model.scope().path() + "/request:", 0), 0u) << e.owner;
    }
    generate(session, greedy(4));
    EXPECT_EQ(ledger.totals().count, before + 4) << "the sampler chain outlived its generation";
  }
  EXPECT_EQ(ledger.totals().count, before + 2);
}

TEST_P(Generate, UnloadingTheModelClosesItsLiveSessionsFirst) {
  Ledger& ledger = Ledger::process();
  const uint64_t before = ledger.totals().count;
  auto model = std::make_unique<Model>(load_of(small_model(GetParam())));
  auto session = std::make_unique<Session>(*model, session_options());
  model->unload();
  EXPECT_FALSE(model->loaded());
  EXPECT_EQ(ledger.totals().count, before);
  EXPECT_THROW(Session(*model, session_options()), Error);
  // Destroying them afterwards, in either order, frees nothing twice.
  model.reset();
  session.reset();
  EXPECT_EQ(ledger.totals().count, before);
}

INSTANTIATE_TEST_SUITE_P(Vocab, Generate, ::testing::Values("spm", "bpe"));


// argmax stands in for llama.cpp's greedy sampler: the same token, the first
// of equal maxima, whatever the length (lanes and the tail) and ties.
TEST(Argmax, PicksWhatLlamaCppsGreedySamplerPicks) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  llama_sampler* greedy = llama_sampler_init_greedy();
  for (int32_t n : {1, 2, 15, 16, 17, 33, 1000, 151936}) {
    for (int round = 0; round < 4; ++round) {
      std::vector<float> logits(static_cast<size_t>(n));
      for (float& x : logits) x = d(rng);
      if (round == 1 && n > 3) logits[static_cast<size_t>(n) / 3] = logits[static_cast<size_t>(n) - 1] = 50.0f;  // a tie
      if (round == 2) std::fill(logits.begin(), logits.end(), 1.0f);  // all equal
      if (round == 3 && n > 20) logits[17] = logits[20] = logits[3] = 60.0f;  // a tie in other lanes
      std::vector<llama_token_data> cands;
      for (int32_t i = 0; i < n; ++i) cands.push_back({i, logits[static_cast<size_t>(i)], 0.0f});
      llama_token_data_array arr{cands.data(), cands.size(), -1, false};
      llama_sampler_apply(greedy, &arr);
      EXPECT_EQ(argmax(logits.data(), n), cands[static_cast<size_t>(arr.selected)].id) << "n=" << n << " round " << round;
    }
  }
  llama_sampler_free(greedy);
}
