// The raw side of the serve-* scenarios: the same work as a plain llama.cpp
// program that serves several requests would do it, without reclaim: one
// context of `parallel` sequences a loaded model, the requests in groups of
// that many, each step one batch of every sequence's next token and the
// prompts that fit. A request cancelled or whose client left has its
// sequence removed where reclaim's would stop (after its prompt, at its
// step); a swap frees one model and loads the other; an unload frees the
// context and the model, in cancel mode in the middle of a group. With a
// draft model (serve-draft), as llama.cpp's speculative example does it: a
// second model and context beside the first, whose greedy picks each step
// are decoded after the sequence's next token and kept while the model picks
// them, the cells of the rest dropped in both contexts. With a projector
// (serve-vision), as llama.cpp's mtmd tools do it: the projector loaded over
// the model, each request's image decoded and its prompt tokenized by mtmd,
// its chunks up to its last text evaluated alone by mtmd_helper_eval_chunk_
// single, and that text decoded in the batch's steps as other prompts are.
#include <llama.h>
#include <mtmd-helper.h>
#include <mtmd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "audit/raw.h"
#include "audit/serve_plan.h"
#include "core/error.h"
#include "engine/owners.h"
#include "engine/sampling.h"

namespace reclaim::audit {

namespace {

// serve-draft: the tokens a step guesses, as reclaim's --draft-max would
// allow at most.
constexpr int kRawGuess = 4;

struct Loaded {
  llama_model* model = nullptr;
  llama_context* ctx = nullptr;
  llama_model* draft = nullptr;  // serve-draft's
  llama_context* draft_ctx = nullptr;
  mtmd_context* mtmd = nullptr;  // serve-vision's projector
  int which = -1;  // the plan's model index

  void free() {
    if (mtmd) mtmd_free(mtmd);
    mtmd = nullptr;
    if (draft_ctx) llama_free(draft_ctx);
    if (draft) llama_model_free(draft);
    if (ctx) llama_free(ctx);
    if (model) llama_model_free(model);
    draft_ctx = ctx = nullptr;
    draft = model = nullptr;
    which = -1;
  }
};

void load(Loaded& l, const CycleOptions& o, int which, int threads) {
  l.model = llama_model_load_from_file(o.model.c_str(), raw_model_params(o));
  if (!l.model) throw Error("raw side: cannot load '" + o.model + "'");
  l.ctx = llama_init_from_model(l.model, serve_context_params(o, threads));
  if (!l.ctx) throw Error("raw side: cannot create a context");
  // As reclaim: a model with recurrent state decodes without guesses.
  if (o.scenario == Scenario::serve_draft && !llama_model_is_recurrent(l.model) && !llama_model_is_hybrid(l.model)) {
    const std::string path = draft_of(o);
    l.draft = llama_model_load_from_file(path.c_str(), raw_model_params(o));
    if (!l.draft) throw Error("raw side: cannot load the draft '" + path + "'");
    l.draft_ctx = llama_init_from_model(l.draft, serve_context_params(o, threads));
    if (!l.draft_ctx) throw Error("raw side: cannot create the draft's context");
  }
  if (o.scenario == Scenario::serve_vision) {
    mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = o.gpu_layers != 0;
    p.n_threads = threads;
    p.print_timings = false;
    p.warmup = true;
    l.mtmd = mtmd_init_from_file(o.mmproj.c_str(), l.model, p);
    if (!l.mtmd) throw Error("raw side: cannot load the projector '" + o.mmproj + "'");
  }
  l.which = which;
}

// serve-vision: the request's image and prompt as mtmd's chunks.
mtmd_input_chunks* vision_chunks(mtmd_context* mtmd, const ServeRequest& r) {
  const std::string file = audit_image(r.image);
  mtmd_bitmap* bitmap = mtmd_helper_bitmap_init_from_buf(mtmd, reinterpret_cast<const unsigned char*>(file.data()),
                                                         file.size(), false, mtmd_helper_init_opt_default())
                            .bitmap;
  if (!bitmap) throw Error("raw side: mtmd cannot decode the audit's image");
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const std::string text = vision_prompt_text();
  const mtmd_input_text in{text.c_str(), text.size(), true, true};
  const mtmd_bitmap* bitmaps[] = {bitmap};
  const int32_t rc = mtmd_tokenize(mtmd, chunks, &in, bitmaps, 1);
  mtmd_bitmap_free(bitmap);
  if (rc != 0) {
    mtmd_input_chunks_free(chunks);
    throw Error("raw side: mtmd_tokenize failed");
  }
  return chunks;
}

struct Seq {
  const ServeRequest* req = nullptr;
  std::vector<llama_token> prompt;
  llama_sampler* sampler = nullptr;
  int n_past = 0, generated = 0, row = -1, n_in_step = 0;
  bool prompt_done = false, live = true;
  llama_token next = -1;
  // serve-draft: the tokens in its cells, the guess after `next`, and its
  // cells in the draft's context that hold a prefix of `tokens`.
  std::vector<llama_token> tokens, guess;
  int draft_past = 0;
  mtmd_input_chunks* chunks = nullptr;  // serve-vision: its prompt, image and text
};

llama_token greedy(llama_context* ctx, int row) {
  return argmax(llama_get_logits_ith(ctx, row), llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx))));
}

// The draft reads what it lacks of the sequence's tokens and its next one,
// then picks kRawGuess tokens, decoding each but the last.
void raw_guess(llama_context* draft, llama_batch& batch, Seq& q, int seq) {
  llama_memory_seq_rm(llama_get_memory(draft), seq, q.draft_past, -1);
  batch.n_tokens = 0;
  for (int p = q.draft_past; p < static_cast<int>(q.tokens.size()); ++p) {
    batch_add(batch, q.tokens[static_cast<size_t>(p)], p, seq, false);
  }
  batch_add(batch, q.next, static_cast<int>(q.tokens.size()), seq, true);
  q.draft_past = static_cast<int>(q.tokens.size()) + 1;
  q.guess.clear();
  for (;;) {
    if (llama_decode(draft, batch) != 0) throw Error("raw side: the draft's llama_decode failed");
    q.guess.push_back(greedy(draft, batch.n_tokens - 1));
    if (static_cast<int>(q.guess.size()) == kRawGuess) return;
    batch.n_tokens = 0;
    batch_add(batch, q.guess.back(), q.draft_past++, seq, true);
  }
}

struct GroupCounts {
  int cancelled_in_prompt = 0, cancelled_in_generation = 0, not_cancelled = 0;
};

// One group of at most `parallel` requests, to their ends; `stop_at_step` >
// 0: all of them stop after that many decodes (an unload in cancel mode).
GroupCounts run_group(llama_context* ctx, llama_context* draft, mtmd_context* mtmd, const llama_vocab* vocab,
                      const std::vector<const ServeRequest*>& group, const CycleOptions& o, int stop_at_step) {
  GroupCounts counts;
  llama_memory_t mem = llama_get_memory(ctx);
  llama_batch batch = llama_batch_init(o.n_ctx, 0, 1);
  std::vector<Seq> seqs(group.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s].req = group[s];
    seqs[s].prompt = request_prompt(vocab, *group[s]);
    if (mtmd && group[s]->image >= 0) seqs[s].chunks = vision_chunks(mtmd, *group[s]);
    seqs[s].sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(seqs[s].sampler, llama_sampler_init_greedy());
  }
  auto end = [&](Seq& q, bool cancelled) {
    llama_memory_seq_rm(mem, static_cast<llama_seq_id>(&q - seqs.data()), -1, -1);
    if (draft) llama_memory_seq_rm(llama_get_memory(draft), static_cast<llama_seq_id>(&q - seqs.data()), -1, -1);
    q.live = false;
    if (!cancelled) {
      ++counts.not_cancelled;
    } else if (q.generated == 0) {
      ++counts.cancelled_in_prompt;
    } else {
      ++counts.cancelled_in_generation;
    }
  };
  for (int step = 0;; ++step) {
    // An image's prompt up to its last text, by mtmd's helper, alone; that
    // text joins the step's batch as a prompt does, after the image's cells.
    for (size_t s = 0; s < seqs.size(); ++s) {
      Seq& q = seqs[s];
      if (!q.live || !q.chunks) continue;
      const size_t n = mtmd_input_chunks_size(q.chunks);
      llama_pos past = 0;
      for (size_t c = 0; c + 1 < n; ++c) {
        if (mtmd_helper_eval_chunk_single(mtmd, ctx, mtmd_input_chunks_get(q.chunks, c), past,
                                          static_cast<llama_seq_id>(s), kServeStepTokens, false, &past) != 0) {
          throw Error("raw side: mtmd_helper_eval_chunk_single failed");
        }
      }
      size_t n_text = 0;
      const llama_token* text = mtmd_input_chunk_get_tokens_text(mtmd_input_chunks_get(q.chunks, n - 1), &n_text);
      if (!text || n_text == 0) throw Error("raw side: the prompt does not end with text");
      q.prompt.assign(text, text + n_text);
      q.n_past = past;
      mtmd_input_chunks_free(q.chunks);
      q.chunks = nullptr;
    }
    // Each guess first, in the draft's own batches.
    for (size_t s = 0; draft && s < seqs.size(); ++s) {
      if (seqs[s].live && seqs[s].prompt_done) raw_guess(draft, batch, seqs[s], static_cast<int>(s));
    }
    batch.n_tokens = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      Seq& q = seqs[s];
      q.n_in_step = 0;
      q.row = -1;
      if (!q.live) continue;
      if (q.prompt_done) {
        q.row = batch.n_tokens;
        batch_add(batch, q.next, q.n_past, static_cast<int>(s), true);
        for (size_t k = 0; draft && k < q.guess.size(); ++k) {
          batch_add(batch, q.guess[k], q.n_past + 1 + static_cast<int>(k), static_cast<int>(s), true);
        }
        q.n_in_step = batch.n_tokens - q.row;
      } else if (const auto n_prompt = static_cast<int>(q.prompt.size()); batch.n_tokens + n_prompt <= o.n_ctx) {
        for (int k = 0; k < n_prompt; ++k) {
          batch_add(batch, q.prompt[static_cast<size_t>(k)], q.n_past + k, static_cast<int>(s), k == n_prompt - 1);
        }
        q.row = batch.n_tokens - 1;
        q.n_in_step = n_prompt;
      }
    }
    if (batch.n_tokens == 0) break;
    if (llama_decode(ctx, batch) != 0) throw Error("raw side: llama_decode failed");
    for (Seq& q : seqs) {
      if (q.n_in_step == 0) continue;
      const bool was_prompt = !q.prompt_done;
      const int written = q.n_past + q.n_in_step;
      q.n_past += was_prompt ? q.n_in_step : 1;
      q.prompt_done = true;
      if (draft) {
        if (was_prompt) q.tokens = q.prompt;
        else q.tokens.push_back(q.next);
      }
      const RequestEnd how = q.req->end;
      if (was_prompt && how == RequestEnd::cancel && q.req->plan.in_prompt) {
        end(q, true);
        continue;
      }
      // The rows in order while the model picks what was guessed.
      for (int i = 0;; ++i) {
        const llama_token t = llama_sampler_sample(q.sampler, ctx, q.row + i);
        ++q.generated;
        if (llama_vocab_is_eog(vocab, t) || q.generated >= o.n_generate) {
          end(q, false);
        } else if ((how == RequestEnd::cancel && q.generated >= q.req->plan.step) ||
                   (how == RequestEnd::vanish && q.generated >= 1)) {
          end(q, true);
        } else {
          q.next = t;
          if (!was_prompt && i + 1 < q.n_in_step && t == q.guess[static_cast<size_t>(i)]) {
            q.tokens.push_back(t);
            ++q.n_past;
            continue;
          }
        }
        break;
      }
      if (!q.live) continue;
      if (q.n_past < written) llama_memory_seq_rm(mem, static_cast<llama_seq_id>(&q - seqs.data()), q.n_past, -1);
      q.draft_past = std::min(q.draft_past, static_cast<int>(q.tokens.size()));
    }
    if (stop_at_step > 0 && step + 1 >= stop_at_step) {
      for (Seq& q : seqs) {
        if (q.live) end(q, true);
      }
    }
  }
  for (Seq& q : seqs) {
    llama_sampler_free(q.sampler);
    if (q.chunks) mtmd_input_chunks_free(q.chunks);
  }
  llama_batch_free(batch);
  return counts;
}

// An embedding request as a plain program makes one: a context with
// embeddings on, its prompt in one batch, the pooled vector read, the context
// freed. Pooled as reclaim's is (engine/embed.h): the model's own, else mean.
void raw_embed(llama_model* model, const std::vector<llama_token>& prompt, int threads) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(prompt.size());
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.embeddings = true;
  cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
  char arch[64] = {0}, pooling[16] = {0};
  if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch) >= 0 &&
      llama_model_meta_val_str(model, (std::string(arch) + ".pooling_type").c_str(), pooling, sizeof pooling) >= 0 &&
      std::atoi(pooling) > 0) {
    cp.pooling_type = static_cast<enum llama_pooling_type>(std::atoi(pooling));
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) throw Error("raw side: cannot create an embedding context");
  llama_batch batch = llama_batch_init(static_cast<int32_t>(prompt.size()), 0, 1);
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.token[i] = prompt[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = true;
  }
  batch.n_tokens = static_cast<int32_t>(prompt.size());
  const int rc = llama_decode(ctx, batch);
  const bool pooled = rc == 0 && llama_get_embeddings_seq(ctx, 0) != nullptr;
  llama_batch_free(batch);
  llama_free(ctx);
  if (!pooled) throw Error("raw side: no pooled embedding");
}

// One cycle of the plan; `rec` null: the device warm-up before the baseline.
void raw_serve_cycle(const CycleOptions& o, const ServeCycle& plan, int threads, size_t n_seq, Recorder* rec) {
  Loaded l;
  for (size_t w = 0; w < plan.waves.size(); ++w) {
    const bool unload_now = w + 1 == plan.waves.size() && plan.end != CycleEnd::unload;
    // A model's requests together; the other model after a swap.
    for (int which : {0, 1}) {
      std::vector<const ServeRequest*> mine;
      for (const ServeRequest& r : plan.waves[w]) {
        if (r.model == which) mine.push_back(&r);
      }
      for (size_t first = 0; first < mine.size(); first += n_seq) {
        if (l.which != which) {
          l.free();
          load(l, o, which, threads);
          if (unload_now && rec) rec->loaded();
        }
        const std::vector<const ServeRequest*> group(mine.begin() + static_cast<std::ptrdiff_t>(first),
                                                     mine.begin() + static_cast<std::ptrdiff_t>(std::min(mine.size(), first + n_seq)));
        if (o.scenario == Scenario::serve_embed) {
          for (const ServeRequest* r : group) raw_embed(l.model, request_prompt(llama_model_get_vocab(l.model), *r), threads);
          continue;
        }
        const GroupCounts g = run_group(l.ctx, l.draft_ctx, l.mtmd, llama_model_get_vocab(l.model), group, o,
                                        plan.end == CycleEnd::cancel_unload && unload_now ? 2 : 0);
        if (rec && (o.scenario == Scenario::serve_cancel || o.scenario == Scenario::serve_vanish ||
                    o.scenario == Scenario::serve_draft || o.scenario == Scenario::serve_vision ||
                    (plan.end == CycleEnd::cancel_unload && unload_now))) {
          for (int i = 0; i < g.not_cancelled; ++i) rec->count_cancel(false, false);
          for (int i = 0; i < g.cancelled_in_prompt; ++i) rec->count_cancel(true, true);
          for (int i = 0; i < g.cancelled_in_generation; ++i) rec->count_cancel(true, false);
        }
      }
    }
    if (unload_now || !rec) continue;
    if (w == 0) rec->loaded();
    rec->request_done();
  }
  l.free();
}

}  // namespace

SideResult run_raw_serve_cycles(const CycleOptions& o) {
  SideResult out;
  start_raw_side(out);
  out.requests_from_first = true;
  const int threads = raw_threads(o);
  const size_t n_seq = static_cast<size_t>(std::max(1, o.parallel));
  Recorder rec(out);
  size_t most_waves = 0;
  for (int c = 0; c < o.cycles; ++c) most_waves = std::max(most_waves, plan_serve_cycle(o, c).waves.size());
  rec.reserve(o.cycles, static_cast<int>(most_waves));
  if (warm_device_first(out)) {
    for (const ServeCycle& plan : serve_warmup_cycles(o)) raw_serve_cycle(o, plan, threads, n_seq, nullptr);
  }
  rec.set_baseline(Usage::capture());

  for (int c = 0; c < o.cycles; ++c) {
    rec.begin_cycle(c);
    raw_serve_cycle(o, plan_serve_cycle(o, c), threads, n_seq, &rec);
    rec.end_cycle(0, 0);
  }
  return out;
}

}  // namespace reclaim::audit
