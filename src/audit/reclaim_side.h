// What the two reclaim sides share (reclaim_cycles.cpp: run's path,
// serve_cycles.cpp: serve's): the start-up and the request they make.
#pragma once

#include "audit/cycles.h"
#include "engine/generate.h"
#include "engine/llama_runtime.h"

namespace reclaim::audit {

inline void start_reclaim_side(SideResult& out, const Runtime& runtime) {
  out.side = "reclaim";
  out.start_before = runtime.before();
  out.warmed = runtime.warmed();
}

// Greedy, so that both sides (and every cycle) decode the same tokens.
inline GenerateRequest greedy_request(const CycleOptions& o, const llama_vocab* vocab) {
  GenerateRequest req;
  req.prompt_tokens = audit_prompt(vocab);
  req.max_tokens = o.n_generate;
  req.sampling.temperature = 0;
  return req;
}

}  // namespace reclaim::audit
