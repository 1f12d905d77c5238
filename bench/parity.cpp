// bench/parity: how far a request decoded beside others is from the same
// request decoded alone, on this machine's llama.cpp build, and which of
// ggml's operations make the difference.
//
//   build/bin/bench-parity [--type f16] [--embd 64] [--layers 2] [--requests 4] [--tokens 48] [--seeds 8]
//   build/bin/bench-parity --ops
//
// Runs: for each seed, a random-weight model (make-test-model, spm vocab),
// and `requests` prompts generated greedily, each alone on a session of its
// own and then all of them together on one batch, as the batcher test does.
// Each pair is judged by compare_runs (engine/parity.h): the largest
// difference of a top log-probability before the runs part, the step where
// they part, and alone's lead of its best token over its second there.
//
// --ops: one generation step, decoded for sequence 0 alone and for three
// sequences together after the same prompts, with every node of the graph
// read back (llama.cpp's eval callback); prints, in graph order, each node
// whose values for sequence 0 differ between the two, with its operation,
// its shape and the largest difference. The first of them is where the
// batch shape enters.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ggml-backend.h>
#include <ggml.h>

#include "core/error.h"
#include "engine/batcher.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/parity.h"
#include "engine/llama_runtime.h"
#include "engine/session.h"
#include "engine/test_model.h"

using namespace reclaim;

namespace {

struct Options {
  std::string type = "f16";
  int embd = 64, layers = 2, requests = 4, tokens = 48, seeds = 8;
  bool ops = false;
};

std::string make_model(const Options& o, uint64_t seed) {
  TestModelSpec s;
  s.vocab = "spm";
  s.type = o.type;
  s.n_embd = o.embd;
  s.n_layer = o.layers;
  s.n_ctx_train = 2048;
  s.seed = seed;
  const std::string dir = cache_dir() + "/bench-parity";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + o.type + "-" + std::to_string(o.embd) + "x" +
                           std::to_string(o.layers) + "-s" + std::to_string(seed) + ".gguf";
  make_test_model(s, path);
  return path;
}

SessionOptions session() {
  SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 64;
  return so;
}

std::vector<llama_token> prompt(const llama_vocab* vocab, std::mt19937& rng, int n) {
  std::uniform_int_distribution<llama_token> pick(3, llama_vocab_n_tokens(vocab) - 1);
  std::vector<llama_token> t(static_cast<size_t>(n));
  for (llama_token& x : t) x = pick(rng);
  return t;
}

// --- runs ---------------------------------------------------------------------

// A step's two likeliest tokens and their log-probabilities, or how the run
// ended there.
std::string best_two(const GenerateResult& r, int32_t step) {
  if (static_cast<size_t>(step) >= r.logprobs.size()) return std::string("ended (") + finish_reason_name(r.finish) + ")";
  const TokenLogprob& lp = r.logprobs[static_cast<size_t>(step)];
  char b[96];
  std::snprintf(b, sizeof b, "%d (%.6f) %d (%.6f)", lp.top[0].first, static_cast<double>(lp.top[0].second),
                lp.top[1].first, static_cast<double>(lp.top[1].second));
  return b;
}

struct Tally {
  int pairs = 0, parted = 0, failed = 0;
  float max_delta = 0;
  double steps = 0;
};

void runs(const Options& o) {
  Tally all;
  std::printf("%-6s %-4s %6s %10s %8s %10s  %s\n", "model", "req", "steps", "max |d|", "parted", "margin", "verdict");
  for (int seed = 1; seed <= o.seeds; ++seed) {
    ModelLoad l;
    l.path = make_model(o, static_cast<uint64_t>(seed));
    Model model(l);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<GenerateRequest> reqs;
    for (int i = 0; i < o.requests; ++i) {
      GenerateRequest r;
      r.prompt_tokens = prompt(model.vocab(), rng, 5 + 9 * i);
      r.max_tokens = o.tokens;
      r.sampling.temperature = 0;
      r.logprobs = kParityLogprobs;
      reqs.push_back(r);
    }
    std::vector<GenerateResult> alone;
    for (const GenerateRequest& r : reqs) {
      Session s(model, session());
      alone.push_back(generate(s, r));
    }
    Batcher& b = model.start_batcher({o.requests, session()});
    std::vector<std::future<GenerateResult>> together;
    {
      // All of them in before the first step, as the batcher test holds them.
      std::lock_guard hold(model.decode_mutex());
      for (const GenerateRequest& r : reqs) together.push_back(std::async(std::launch::async, [&b, &r] { return b.generate(r); }));
      while (b.active() + b.waiting() < reqs.size()) std::this_thread::yield();
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      const GenerateResult got = together[i].get();
      const Parity p = compare_runs(alone[i], got);
      ++all.pairs;
      all.parted += p.parted_at >= 0;
      all.failed += !p.holds;
      all.max_delta = std::max(all.max_delta, p.max_delta);
      all.steps += p.steps_compared;
      char parted[16] = "-", margin[16] = "-";
      std::string verdict = p.holds ? "holds" : p.why;
      if (p.parted_at >= 0) {
        std::snprintf(parted, sizeof parted, "%d", p.parted_at);
        std::snprintf(margin, sizeof margin, "%.3g", static_cast<double>(p.margin));
        verdict += "; alone's two best there: " + best_two(alone[i], p.parted_at) + ", together: " + best_two(got, p.parted_at);
      }
      std::printf("s%-5d %-4zu %6d %10.3g %8s %10s  %s\n", seed, i, p.steps_compared, static_cast<double>(p.max_delta),
                  parted, margin, verdict.c_str());
    }
  }
  std::printf("\n%d pairs, %d parted, %d broke the promise; largest |d| before parting %.3g (tolerance %.3g), %.0f steps compared\n",
              all.pairs, all.parted, all.failed, static_cast<double>(all.max_delta),
              static_cast<double>(kLogitTolerance), all.steps);
}

// --- ops ----------------------------------------------------------------------

// Every node's values after one decode, as floats, with its operation.
struct Node {
  std::string op;
  int64_t ne[4];
  std::vector<float> v;
};

struct Capture {
  std::vector<std::pair<std::string, Node>> nodes;  // in graph order
  bool on = false;
};

float element(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const char* p = static_cast<const char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
  if (t->type == GGML_TYPE_F32) return *reinterpret_cast<const float*>(p);
  return ggml_fp16_to_fp32(*reinterpret_cast<const ggml_fp16_t*>(p));
}

bool observe(ggml_tensor* t, bool ask, void* data) {
  auto* c = static_cast<Capture*>(data);
  const bool readable = (t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_F16) && t->buffer &&
                        ggml_backend_buffer_is_host(t->buffer);
  if (ask) return c->on && readable;
  if (!c->on || !readable) return true;
  Node n;
  n.op = ggml_op_desc(t);
  std::copy(t->ne, t->ne + 4, n.ne);
  n.v.reserve(static_cast<size_t>(ggml_nelements(t)));
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) n.v.push_back(element(t, i0, i1, i2, i3));
  c->nodes.emplace_back(t->name, std::move(n));
  return true;
}

// Sequence 0's values of a batched node: the slice at 0 along the one
// dimension where the batch has `n` and the solo run 1, all else equal.
bool slice0(const Node& batch, const Node& solo, int n, std::vector<float>& out) {
  int dim = -1;
  for (int d = 3; d >= 0; --d) {
    if (batch.ne[d] == solo.ne[d]) continue;
    if (dim >= 0 || batch.ne[d] != n || solo.ne[d] != 1) return false;
    dim = d;
  }
  if (dim < 0) {
    out = batch.v;
    return true;
  }
  out.clear();
  int64_t stride = 1;
  for (int d = 0; d < dim; ++d) stride *= batch.ne[d];
  const int64_t outer = static_cast<int64_t>(batch.v.size()) / (stride * n);
  for (int64_t k = 0; k < outer; ++k) {
    const auto first = batch.v.begin() + static_cast<std::ptrdiff_t>(k * stride * n);
    out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(stride));
  }
  return true;
}

llama_token argmax_row(llama_context* ctx, int32_t row, int32_t n_vocab) {
  const float* l = llama_get_logits_ith(ctx, row);
  return static_cast<llama_token>(std::max_element(l, l + n_vocab) - l);
}

void ops(const Options& o) {
  constexpr int kSeqs = 3;
  ModelLoad l;
  l.path = make_model(o, 1);
  Model model(l);
  const int32_t n_vocab = llama_vocab_n_tokens(model.vocab());
  std::mt19937 rng(1);
  std::vector<std::vector<llama_token>> prompts;
  for (int s = 0; s < kSeqs; ++s) prompts.push_back(prompt(model.vocab(), rng, 7 + 5 * s));

  Capture solo_c, batch_c;
  using Context = std::unique_ptr<llama_context, decltype(&llama_free)>;
  auto context = [&](Capture& c) {
    llama_context_params cp = batch_context_params({kSeqs, session()}, model.info().n_ctx_train, model.n_threads());
    cp.cb_eval = observe;
    cp.cb_eval_user_data = &c;
    Context ctx(llama_init_from_model(model.get(), cp), llama_free);
    if (!ctx) throw Error("llama.cpp could not make a context");
    return ctx;
  };
  const Context solo_ctx = context(solo_c), batch_ctx = context(batch_c);
  llama_context* solo = solo_ctx.get();
  llama_context* batch = batch_ctx.get();
  // The same prompts, each decoded on its own: the sequences' cells are the
  // same bits on both sides before the step compared.
  struct Batch {
    llama_batch b = llama_batch_init(64, 0, kSeqs);
    ~Batch() { llama_batch_free(b); }
  } held;
  llama_batch& one = held.b;
  auto decode_prompt = [&](llama_context* ctx, int s) {
    one.n_tokens = 0;
    for (size_t i = 0; i < prompts[s].size(); ++i) {
      one.token[i] = prompts[s][i];
      one.pos[i] = static_cast<llama_pos>(i);
      one.n_seq_id[i] = 1;
      one.seq_id[i][0] = s;
      one.logits[i] = i + 1 == prompts[s].size();
      ++one.n_tokens;
    }
    if (llama_decode(ctx, one) != 0) throw Error("prompt decode failed");
    return argmax_row(ctx, -1, n_vocab);
  };
  std::vector<llama_token> next(kSeqs);
  next[0] = decode_prompt(solo, 0);
  for (int s = 0; s < kSeqs; ++s) next[s] = decode_prompt(batch, s);

  for (int step = 0; step < 8; ++step) {
    solo_c.nodes.clear();
    batch_c.nodes.clear();
    solo_c.on = batch_c.on = true;
    auto add = [&](int i, int s) {
      one.token[i] = next[s];
      one.pos[i] = static_cast<llama_pos>(prompts[s].size() + step);
      one.n_seq_id[i] = 1;
      one.seq_id[i][0] = s;
      one.logits[i] = true;
    };
    one.n_tokens = 1;
    add(0, 0);
    if (llama_decode(solo, one) != 0) throw Error("solo decode failed");
    one.n_tokens = kSeqs;
    for (int s = 0; s < kSeqs; ++s) add(s, s);
    if (llama_decode(batch, one) != 0) throw Error("batch decode failed");
    solo_c.on = batch_c.on = false;

    std::printf("step %d (sequence 0 alone: 1 token; together: %d tokens)\n", step, kSeqs);
    std::map<std::string, int> by_op;
    size_t shown = 0, compared = 0;
    for (size_t k = 0; k < std::min(solo_c.nodes.size(), batch_c.nodes.size()); ++k) {
      const auto& [name, s] = solo_c.nodes[k];
      const auto& [bname, b] = batch_c.nodes[k];
      std::vector<float> b0;
      // The KV cache's own views hold the other sequences' cells too.
      if (name != bname || name.rfind("cache_", 0) == 0) continue;
      if (!slice0(b, s, kSeqs, b0) || b0.size() != s.v.size()) continue;
      ++compared;
      float d = 0;
      for (size_t i = 0; i < b0.size(); ++i) d = std::max(d, std::fabs(b0[i] - s.v[i]));
      if (d == 0) continue;
      ++by_op[s.op];
      if (shown++ < 6) {
        std::printf("  %-24s %-16s [%lld,%lld,%lld,%lld]  max |d| %.3g\n", name.c_str(), s.op.c_str(),
                    static_cast<long long>(s.ne[0]), static_cast<long long>(s.ne[1]), static_cast<long long>(s.ne[2]),
                    static_cast<long long>(s.ne[3]), static_cast<double>(d));
      }
    }
    const float* ls = llama_get_logits_ith(solo, 0);
    const float* lb = llama_get_logits_ith(batch, 0);
    float dl = 0;
    for (int32_t i = 0; i < n_vocab; ++i) dl = std::max(dl, std::fabs(ls[i] - lb[i]));
    std::printf("  %zu of %zu nodes compared differ;", shown, compared);
    for (const auto& [op, n] : by_op) std::printf(" %s %d", op.c_str(), n);
    std::printf("; logits max |d| %.3g\n", static_cast<double>(dl));
    next[0] = argmax_row(solo, 0, n_vocab);
    const llama_token b0 = argmax_row(batch, 0, n_vocab);
    if (b0 != next[0]) std::printf("  the picks part here: %d alone, %d together\n", next[0], b0);
    for (int s = 1; s < kSeqs; ++s) next[s] = argmax_row(batch, s, n_vocab);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"How far batched decoding is from decoding alone, on this build"};
  app.add_option("--type", o.type, "weights: f32, f16 or q8_0");
  app.add_option("--embd", o.embd, "model width");
  app.add_option("--layers", o.layers, "model layers");
  app.add_option("--requests", o.requests, "requests decoded together")->check(CLI::Range(2, 16));
  app.add_option("--tokens", o.tokens, "tokens each request generates");
  app.add_option("--seeds", o.seeds, "random models, one a seed");
  app.add_flag("--ops", o.ops, "name the graph nodes whose values differ in one step");
  CLI11_PARSE(app, argc, argv);
  try {
    Runtime runtime;
    if (o.ops) {
      ops(o);
    } else {
      runs(o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-parity: %s\n", e.what());
    return 1;
  }
  return 0;
}
