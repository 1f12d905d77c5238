// Speculative decoding as a client of `reclaim serve` sees it: a model set
// to guess (--config's spec_type, or --spec-type for all) answers what the
// same model answers without guesses, its timings say what was guessed and
// kept (llama-server's draft_n, draft_n_accepted), /metrics and /slots count
// it, and a mistake in its settings is refused where it is read.
#include <httplib.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "served.h"
#include "served_parity.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

json chat(const std::string& model) {
  return {{"model", model},
          {"messages", {{{"role", "user"}, {"content", "Count the rivers of the north, one by one, again and again."}}}},
          {"max_tokens", 64},
          {"temperature", 0},
          {"cache_prompt", false},
          {"logprobs", true},
          {"top_logprobs", reclaim::kParityLogprobs}};
}

std::string config(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

// A target whose last two layers add nothing, and its two drafts: the same
// seed with two layers (always right) and another vocabulary (refused).
struct Pair {
  std::string target, right;
};
const Pair& pair() {
  static const Pair p = [] {
    Pair out{temp_path("serve-draft-target.gguf"), temp_path("serve-draft-right.gguf")};
    const std::string shape = " --vocab bpe --embd 64 --type q8_0";
    EXPECT_EQ(run("make-test-model --out " + out.target + shape + " --layers 4 --zero-layers-from 2").status, 0);
    EXPECT_EQ(run("make-test-model --out " + out.right + shape + " --layers 2").status, 0);
    return out;
  }();
  return p;
}

// The answer of a model that guesses is the one without guesses, by the
// promise of engine/parity.h.
void expect_same_answer(const json& without, const json& with, const std::string& what) {
  Answers answers;  // one, so that both answers' tokens get the same ids
  reclaim::GenerateResult a, b;
  answers.add(without["choices"][0], a);
  answers.add(with["choices"][0], b);
  expect_as_alone(a, b, what);
}

// The bytes on the ledger of every owner whose path holds `owner`.
int64_t ledger_bytes_under(Served& s, const std::string& owner) {
  int64_t bytes = 0;
  const json owners = s.get("/v1/resources")["ledger"]["by_owner"];
  for (const auto& [name, t] : owners.items()) {
    if (name.find(owner) != std::string::npos) bytes += t["bytes"].get<int64_t>();
  }
  return bytes;
}

}  // namespace

TEST(ServeSpeculation, AModelThatGuessesAnswersAsWithoutAndCountsItsGuesses) {
  // The same file twice: one model guesses, the other does not. These random
  // models soon repeat a short loop, which a one-token n-gram matches.
  const std::string path = config("speculation.toml",
                                  "[models.plain]\npath = \"" + bpe() + "\"\n"
                                  "[models.guess]\npath = \"" + bpe() + "\"\n"
                                  "spec_type = \"ngram-simple\"\ndraft_max = 8\n");
  Served s({"--config", path, "--spec-ngram-size-n", "1"}, false);
  const json plain = s.post_json("/v1/chat/completions", chat("plain"));
  const json guess = s.post_json("/v1/chat/completions", chat("guess"));
  expect_same_answer(plain, guess, "the model that guesses");
  EXPECT_FALSE(plain["timings"].contains("draft_n")) << plain["timings"].dump();
  ASSERT_TRUE(guess["timings"].contains("draft_n")) << guess["timings"].dump();
  const int drafted = guess["timings"]["draft_n"], kept = guess["timings"]["draft_n_accepted"];
  EXPECT_GT(drafted, 0);
  EXPECT_GT(kept, 0) << "no guess was kept: the test proves nothing";
  EXPECT_LE(kept, drafted);
  // What was guessed is counted in llama-server's families.
  const auto m = s.http().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("llamacpp:spec_decode_num_draft_tokens_total " + std::to_string(drafted) + "\n"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("llamacpp:spec_decode_num_accepted_tokens_total " + std::to_string(kept) + "\n"), std::string::npos);
  EXPECT_EQ(s.get("/slots?model=guess")[0]["speculative"], true);
  EXPECT_EQ(s.get("/slots?model=plain")[0]["speculative"], false);
  for (const char* name : {"plain", "guess"}) s.post("/v1/models/unload", {{"model", name}});
  s.expect_clean();
}

TEST(ServeSpeculation, ItsSettingsAreCheckedWhereTheyAreRead) {
  const Result bad_type = run("serve --port 0 -m " + bpe() + " --spec-type eagle");
  EXPECT_EQ(bad_type.status, 2) << bad_type.out;
  EXPECT_NE(bad_type.out.find("--spec-type"), std::string::npos) << bad_type.out;
  EXPECT_NE(bad_type.out.find("none, ngram-simple or draft-simple"), std::string::npos) << bad_type.out;
  const Result too_many = run("serve --port 0 -m " + bpe() + " --draft-max 65");
  EXPECT_EQ(too_many.status, 2) << too_many.out;
  const Result crossed = run("serve --port 0 -m " + bpe() + " --draft-max 4 --draft-min 6");
  EXPECT_EQ(crossed.status, 2) << crossed.out;
  EXPECT_NE(crossed.out.find("--draft-min (6) is above --draft-max (4)"), std::string::npos) << crossed.out;
  const std::string m = "[models.a]\npath = \"" + bpe() + "\"\n";
  const Result file_type = run("serve --port 0 --config " + config("spec-bad.toml", m + "spec_type = \"medusa\"\n"));
  EXPECT_EQ(file_type.status, 2);
  EXPECT_NE(file_type.out.find(":3: models.a.spec_type: must be none, ngram-simple or draft-simple"), std::string::npos) << file_type.out;
  const Result file_max = run("serve --port 0 --config " + config("spec-max.toml", m + "draft_max = 0\n"));
  EXPECT_EQ(file_max.status, 2);
  EXPECT_NE(file_max.out.find(":3: models.a.draft_max: must be 1..64"), std::string::npos) << file_max.out;
}

// A model's draft (--config's draft, -m ... --draft): the answer is the
// model's own, nearly every guess of a draft that is always right is kept,
// the draft's weights and context are on the ledger under the model and in
// its estimate, and an unload takes them with it.
TEST(ServeSpeculation, ADraftModelGuessesOnTheLedgerUnderItsModelAndGoesWithIt) {
  const std::string path = config("draft.toml",
                                  "[models.plain]\npath = \"" + pair().target + "\"\n"
                                  "[models.drafted]\npath = \"" + pair().target + "\"\n"
                                  "draft = \"" + pair().right + "\"\ndraft_max = 6\n");
  Served s({"--config", path}, false);
  const json plain = s.post_json("/v1/chat/completions", chat("plain"));
  const json drafted = s.post_json("/v1/chat/completions", chat("drafted"));
  expect_same_answer(plain, drafted, "the model with a draft");
  ASSERT_TRUE(drafted["timings"].contains("draft_n")) << drafted["timings"].dump();
  const int n = drafted["timings"]["draft_n"], kept = drafted["timings"]["draft_n_accepted"];
  EXPECT_GT(kept * 10, n * 8) << kept << " of " << n << " guesses kept";
  EXPECT_GT(ledger_bytes_under(s, "model:drafted/draft"), 0)
      << "the draft is not on the ledger under its model: " << s.get("/v1/resources")["ledger"]["by_owner"].dump();
  EXPECT_GT(s.model("drafted")["estimate"].get<int64_t>(), s.model("plain")["estimate"].get<int64_t>())
      << "the draft is not in the model's estimate";
  s.post("/v1/models/unload", {{"model", "drafted"}});
  EXPECT_TRUE(s.until([&] { return s.model("drafted")["state"] == "unloaded"; }));
  EXPECT_EQ(ledger_bytes_under(s, "model:drafted"), 0);
  s.post("/v1/models/unload", {{"model", "plain"}});
  s.expect_clean();
}

TEST(ServeSpeculation, ADraftOfAnotherVocabularyIsA422AndTheServerServesOn) {
  Served s({"-m", pair().target + ":t", "--draft", spm()}, false);
  expect_error(s.post("/v1/chat/completions", chat("t")), 422, "cannot guess for this model");
  EXPECT_EQ(s.get("/health")["status"], "ok");
  const Result missing = run("serve --port 0 -m " + pair().target + " --draft " + temp_path("no-draft.gguf"));
  EXPECT_EQ(missing.status, 2) << missing.out;
  const std::string one = config("spec-one.toml", "[models.a]\npath = \"" + pair().target + "\"\n");
  const Result alone = run("serve --port 0 --config " + one + " --draft " + pair().right);
  EXPECT_EQ(alone.status, 2) << alone.out;
  EXPECT_NE(alone.out.find("--draft is the draft model of the -m models"), std::string::npos) << alone.out;
  const Result needs = run("serve --port 0 -m " + pair().target + " --spec-type draft-simple");
  EXPECT_EQ(needs.status, 2) << needs.out;
  EXPECT_NE(needs.out.find("needs --draft FILE"), std::string::npos) << needs.out;
  s.expect_clean();
}
