#include "engine/grammar_limits.h"

#include <algorithm>

namespace reclaim {

namespace {

// The end of a quoted literal or a character class that opened at `i`
// (`close` is '"' or ']'): the index after its closing character, or the
// text's end. A backslash takes the character after it, as llama.cpp's
// parse_char does.
size_t skip_quoted(const std::string& s, size_t i, char close) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == close) {
      return i + 1;
    }
  }
  return s.size();
}

}  // namespace

void check_grammar_limits(const std::string& gbnf, const GrammarLimits& limits) {
  if (gbnf.size() > limits.max_bytes) {
    throw GrammarTooLarge("the grammar is " + std::to_string(gbnf.size()) + " bytes, more than the limit of " +
                          std::to_string(limits.max_bytes));
  }
  int depth = 0, deepest = 0;
  size_t rules = 0;
  for (size_t i = 0; i < gbnf.size();) {
    const char c = gbnf[i];
    if (c == '#') {
      const size_t eol = gbnf.find('\n', i);
      i = eol == std::string::npos ? gbnf.size() : eol + 1;
    } else if (c == '"') {
      i = skip_quoted(gbnf, i, '"');
    } else if (c == '[') {
      i = skip_quoted(gbnf, i, ']');
    } else if (c == '<') {
      // A token, <[123]> or <|name|>: to its '>'.
      const size_t end = gbnf.find('>', i + 1);
      i = end == std::string::npos ? gbnf.size() : end + 1;
    } else {
      if (c == '(') deepest = std::max(deepest, ++depth);
      if (c == ')') depth = std::max(0, depth - 1);
      if (c == ':' && gbnf.compare(i, 3, "::=") == 0) ++rules;
      ++i;
    }
    if (deepest > limits.max_nesting) {
      throw GrammarTooLarge("the grammar nests groups more than " + std::to_string(limits.max_nesting) + " deep");
    }
  }
  if (rules > limits.max_rules) {
    throw GrammarTooLarge("the grammar has " + std::to_string(rules) + " rules, more than the limit of " +
                          std::to_string(limits.max_rules));
  }
}

}  // namespace reclaim
