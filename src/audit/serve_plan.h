// The serve-path scenarios of an audit: the work a cycle asks for, the same
// on both sides. The reclaim side does it as `reclaim serve` does, through a
// Registry and the model's Batcher, each request on a worker thread of the
// server's pool; the raw side as a plain llama.cpp program would, in one
// context with a sequence a request.
#pragma once

#include <vector>

#include "audit/cycles.h"

namespace reclaim::audit {

// How a request of the plan ends.
// Tokens in one decode step, on both sides. Fewer than any audit prompt
// has, so that every cycle's first step, one prompt alone, is as large as
// any step after it: ggml's CPU backend keeps a work buffer as large as the
// largest step so far, and a later step that put two prompts together would
// grow it, which the audit would count as a request's growth (it did, by
// 292 KiB on llama.cpp's llama test model, in serve-vanish).
inline constexpr int kServeStepTokens = 16;
// serve-chat: tokens of each turn's message.
inline constexpr int kChatMessageTokens = 48;

enum class RequestEnd {
  run,     // to its length
  cancel,  // its caller cancels it: in the prompt or at a generation step (plan)
  vanish,  // its client leaves: while it waits for a slot, else after its first text
};

struct ServeRequest {
  int model = 0;  // 0: "a", 1: "b" (the same file under two names: serve-swap)
  RequestEnd end = RequestEnd::run;
  CancelPlan plan;  // with RequestEnd::cancel
  // serve-chat: the request is turn `turn` of conversation `conversation`;
  // -1: the audit's prompt alone.
  int conversation = -1, turn = 0;
  // serve-vision: which of the audit's images the request brings (they
  // repeat, so that a prompt cache could find one again); -1: none.
  int image = -1;
};

// A request's prompt, the same on both sides: the audit's prompt, and for a
// turn of a conversation, a message of that conversation for each turn so
// far, so that each turn's prompt begins with the one before (as a chat
// client resends the history; the replies are left out, so the prompt cache
// cuts a sequence where the last reply began).
std::vector<llama_token> request_prompt(const llama_vocab* vocab, const ServeRequest& request);
// serve-vision: the request's prompt as text, its image first, and the image,
// a small PPM file (stb_image reads it; no encoder needed), of a shade and
// size of its own.
std::string vision_prompt_text();
std::string audit_image(int which);

// How a cycle of the plan ends, once its waves have run.
enum class CycleEnd {
  unload,         // unload in drain mode, nothing running
  drain,          // unload in drain mode while the last wave runs: it finishes
  cancel_unload,  // unload in cancel mode while the last wave runs: it is cut
};

struct ServeCycle {
  std::vector<std::vector<ServeRequest>> waves;  // a wave's requests arrive together
  CycleEnd end = CycleEnd::unload;
};

// serve, serve-cancel, serve-vanish: waves of 2 x parallel requests (half of
// each wave waits for a sequence), `requests` in all; the first wave runs
// whole, the later ones are cancelled or lose their clients. serve-swap: one wave of
// `requests` alternating between two models of which the budget holds one.
// serve-drain, serve-unload-cancel: one wave of `parallel` requests, and the
// unload while they run. serve-chat: 2 x parallel conversations, a wave a
// turn, requests / (2 x parallel) turns, all run whole; the reclaim side
// keeps and reuses their cells in its prompt cache, saving those whose
// sequence another takes to host memory, and the raw side decodes each
// prompt whole. serve-embed: waves of 2 x parallel embedding requests,
// `requests` in all, each in a context of its own (engine/embed.h) beside the
// model's batch, as /v1/embeddings and /api/embed run them.
ServeCycle plan_serve_cycle(const CycleOptions& o, int cycle);

// The scenario's names for its models.
inline const char* serve_model_name(int model) { return model == 0 ? "a" : "b"; }

// The serve-path sides' device warm-up (warm_device_first): a cycle of the
// serve scenario, whose waves decode the widest range of step sizes (each
// size may need pipelines of its own), then the scenario's first cycle.
std::vector<ServeCycle> serve_warmup_cycles(const CycleOptions& o);

}  // namespace reclaim::audit
