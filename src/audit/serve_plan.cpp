#include "audit/serve_plan.h"

#include <algorithm>

#include "engine/image_prompt.h"

namespace reclaim::audit {

ServeCycle plan_serve_cycle(const CycleOptions& o, int cycle) {
  ServeCycle c;
  const int n_seq = std::max(1, o.parallel);
  auto one_wave = [&](int n) {
    std::vector<ServeRequest> wave(static_cast<size_t>(n));
    c.waves.push_back(std::move(wave));
  };
  switch (o.scenario) {
    case Scenario::serve_swap:
      one_wave(o.requests);
      for (size_t i = 0; i < c.waves[0].size(); ++i) c.waves[0][i].model = static_cast<int>(i % 2);
      return c;
    case Scenario::serve_chat: {
      // Twice as many conversations as sequences: each turn, half find
      // their sequence taken, and come back from the saves in host memory.
      // As many turns as the context holds (the audit's prompt, a message
      // a turn, the generated tokens).
      const int fit = std::max(1, (o.n_ctx - 64 - o.n_generate) / kChatMessageTokens);
      for (int t = 0; t < std::clamp(o.requests / (2 * n_seq), 1, fit); ++t) {
        one_wave(2 * n_seq);
        for (int i = 0; i < 2 * n_seq; ++i) {
          c.waves.back()[static_cast<size_t>(i)].conversation = i;
          c.waves.back()[static_cast<size_t>(i)].turn = t;
        }
      }
      return c;
    }
    case Scenario::serve_drain:
    case Scenario::serve_unload_cancel:
      one_wave(n_seq);
      c.end = o.scenario == Scenario::serve_drain ? CycleEnd::drain : CycleEnd::cancel_unload;
      return c;
    default:
      break;
  }
  int index = 0;
  for (int left = o.requests; left > 0;) {
    const int n = std::min(left, 2 * n_seq);
    one_wave(n);
    // The first wave runs whole: it touches as much of the batch's context
    // (KV cells, the compute buffer of the largest step) as any later one, so
    // that what a later wave adds is its own (the request figures count from
    // it). With the first wave cancelled too, a later one that ran further
    // touched 68 KiB more of the same context.
    const bool first = c.waves.size() == 1;
    for (ServeRequest& r : c.waves.back()) {
      if (first) {
        ++index;
        continue;
      }
      if (o.scenario == Scenario::serve_cancel) {
        r.end = RequestEnd::cancel;
        r.plan = plan_cancel(o, cycle, index);
      } else if (o.scenario == Scenario::serve_vanish && index % 2 == 1) {
        r.end = RequestEnd::vanish;
      } else if ((o.scenario == Scenario::serve_draft || o.scenario == Scenario::serve_vision) && index % 3 != 0) {
        // Cancelled at a step (some in their prompts), or their clients gone.
        r.end = index % 3 == 1 ? RequestEnd::cancel : RequestEnd::vanish;
        r.plan = plan_cancel(o, cycle, index);
      }
      ++index;
    }
    left -= n;
  }
  if (o.scenario == Scenario::serve_vision) {
    int k = 0;
    for (auto& wave : c.waves) {
      for (ServeRequest& r : wave) r.image = k++ % 3;
    }
  }
  return c;
}

std::string vision_prompt_text() { return std::string(image_marker()) + "\n" + kAuditPrompt; }

std::string audit_image(int which) {
  const int w = 48 + 16 * which, h = 40 + 8 * which;
  std::string ppm = "P6\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n";
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      ppm += static_cast<char>((x * 5 + which * 70) % 256);
      ppm += static_cast<char>((y * 7 + which * 30) % 256);
      ppm += static_cast<char>((x * y + which * 11) % 256);
    }
  }
  return ppm;
}

std::vector<llama_token> request_prompt(const llama_vocab* vocab, const ServeRequest& r) {
  std::vector<llama_token> prompt = audit_prompt(vocab);
  const auto n_vocab = static_cast<uint32_t>(llama_vocab_n_tokens(vocab));
  for (int t = 0; r.conversation >= 0 && t <= r.turn; ++t) {
    // Different for each conversation and turn, and the same on both
    // sides; ids rather than text, so that any vocabulary (or none) has
    // them. Longer than the audit's prompt that all share, so that a
    // conversation whose sequence another takes would lose most of it
    // however soon its reply ended, and is saved to host memory.
    for (uint32_t i = 0; i < static_cast<uint32_t>(kChatMessageTokens); ++i) {
      const uint32_t id = (static_cast<uint32_t>(r.conversation) * 131u + static_cast<uint32_t>(t) * 17u + i * 7u + 5u) % n_vocab;
      prompt.push_back(static_cast<llama_token>(id));
    }
  }
  return prompt;
}

std::vector<ServeCycle> serve_warmup_cycles(const CycleOptions& o) {
  CycleOptions serve = o;
  serve.scenario = Scenario::serve;
  std::vector<ServeCycle> out{plan_serve_cycle(serve, 0)};
  if (o.scenario != Scenario::serve) out.push_back(plan_serve_cycle(o, 0));
  return out;
}

}  // namespace reclaim::audit
