// The bounds on a grammar's text (engine/grammar_limits.h): each hostile
// shape is refused by name before llama.cpp's parser sees it, and what is
// just inside the bounds parses on a request thread's stack without harm.
#include "engine/grammar_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/model.h"
#include "engine/sampling.h"
#include "small_models.h"

using namespace reclaim;

namespace {

std::string nested(int depth) { return "root ::= " + std::string(static_cast<size_t>(depth), '(') + "\"a\"" + std::string(static_cast<size_t>(depth), ')'); }

// `rules` rules, root ::= r1, r1 ::= r2, ...: llama.cpp's left-recursion
// check follows the chain one call a rule.
std::string chain(int rules) {
  std::string g = "root ::= r1\n";
  for (int i = 1; i + 1 < rules; ++i) g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  g += "r" + std::to_string(rules - 1) + " ::= \"a\"\n";
  return g;
}

std::string what(const std::string& gbnf) {
  try {
    check_grammar_limits(gbnf);
  } catch (const GrammarTooLarge& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GrammarLimits, DeepNestingManyRulesAndSizeAreRefusedByName) {
  EXPECT_NE(what(nested(200000)).find("nests groups more than 1000 deep"), std::string::npos);
  EXPECT_NE(what(chain(10001)).find("10001 rules, more than the limit of 10000"), std::string::npos) << what(chain(10001));
  EXPECT_NE(what("root ::= \"" + std::string(3u << 20, 'a') + "\"").find("more than the limit of 2097152"), std::string::npos);
  // What is quoted, in a class, a token or a comment is not structure.
  EXPECT_EQ(what("root ::= \"" + std::string(5000, '(') + "\" [(]* # " + std::string(5000, '(') + "\n"), "");
  EXPECT_EQ(what("root ::= \"\\\"(((\" [\\](] <|x(|>"), "");
}

TEST(GrammarLimits, WhatIsJustInsideTheBoundsParsesOnARequestThreadsStack) {
  Model model(reclaim::testing::small_load());
  for (const std::string& g : {nested(1000), chain(10000)}) {
    ASSERT_EQ(what(g), "");
    // A request thread's stack is 8 MiB (server/worker_pool.h): so is the
    // main thread's here.
    EXPECT_TRUE(grammar_parses(model.vocab(), g)) << g.substr(0, 60);
  }
  EXPECT_THROW(grammar_parses(model.vocab(), nested(1001)), GrammarTooLarge);
}
