// Bounds on a GBNF grammar's text, checked before llama.cpp's parser sees it.
//
// A grammar comes from a client (its `grammar`), or is made from a client's
// JSON schema or tool list. The pinned parser recurses once per nested group
// and its left-recursion check once per rule on a chain of references, with
// no bound of its own: 200,000 nested parentheses end the process by its
// stack (llama.cpp issue 26600; upstream pull request 26602 adds the same
// two caps inside the parser). The bounds below are far above any grammar a
// schema makes (a body nests at most kMaxJsonDepth, 128, deep) and keep the
// parser's recursion a small part of a request thread's 8 MiB stack: a chain
// of 10,000 rules parses in 1-1.5 MiB (the GrammarLimits tests pass under
// `ulimit -s 1536` and crash under 1024), and a sanitizer's larger frames
// still fit.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.h"

namespace reclaim {

struct GrammarLimits {
  size_t max_bytes = size_t{2} << 20;  // the grammar's text
  int max_nesting = 1000;              // groups inside groups: ( ( ( ... ) ) )
  size_t max_rules = 10000;            // rule definitions, "name ::= ..."
};

// A grammar over one of the bounds: a client's mistake, never llama.cpp's.
class GrammarTooLarge : public Error {
 public:
  using Error::Error;
};

// Throws GrammarTooLarge naming the bound and the grammar's own figure.
void check_grammar_limits(const std::string& gbnf, const GrammarLimits& limits = {});

}  // namespace reclaim
