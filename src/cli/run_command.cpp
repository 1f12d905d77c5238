// `reclaim run`: one generation on the terminal. Text streams to stdout as it
// is made; everything else (progress, timings, notes) goes to stderr, so that
// stdout can be piped. Ctrl-C cancels through the same token that a deadline
// or a vanished client uses in the server, so it exercises the same release.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/cancel.h"
#include "core/error.h"
#include "core/size.h"
#include "engine/chat.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/progress.h"
#include "engine/llama_runtime.h"
#include "engine/test_model.h"
#include "runtime/vetter.h"

namespace reclaim::cli {

namespace {

constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report it
constexpr int kExitStdoutGone = 141;   // 128 + SIGPIPE

CancelToken g_interrupt;

void on_interrupt(int) { g_interrupt.cancel(CancelReason::interrupted); }

// The first Ctrl-C (or SIGTERM) cancels; SA_RESETHAND makes a second one end
// the process at once, for a user who does not want to wait.
void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // A closed stdout shows up as a failed write, which cancels the request.
  ::signal(SIGPIPE, SIG_IGN);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("prompt file '" + path + "' cannot be read: " + std::strerror(errno));
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Args {
  std::string model, prompt, file, system, chat_template, load_mode = "mmap";
  std::vector<std::string> chat, stop;
  int32_t n = 128, ctx = 0, threads = 0, batch = 512, gpu_layers = -1;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  int32_t top_k = 40, repeat_last_n = 64;
  int64_t seed = -1;
  bool json = false, verbose = false, trust_models = false;
};

nlohmann::json result_json(const GenerateResult& r, const Model& model) {
  const Timings& t = r.timings;
  nlohmann::json j = {
      {"model", model.info().path},
      {"text", r.text},
      {"tokens", r.tokens},
      {"finish_reason", finish_reason_name(r.finish)},
      {"seed", r.seed},
      {"usage", {{"prompt_tokens", t.prompt_tokens}, {"completion_tokens", t.generated_tokens}}},
      {"timings",
       {{"prompt_ms", t.prompt_ms},
        {"prompt_per_second", t.prompt_per_second()},
        {"generate_ms", t.generate_ms},
        {"generate_per_second", t.generate_per_second()},
        {"first_token_ms", t.first_token_ms},
        {"total_ms", t.total_ms}}},
  };
  if (r.finish == FinishReason::stop) j["stop"] = r.stop;
  if (r.finish == FinishReason::cancelled) j["cancel_reason"] = cancel_reason_name(r.cancel_reason);
  return j;
}

void print_timings(const GenerateResult& r) {
  const Timings& t = r.timings;
  std::fprintf(stderr,
               "\nreclaim: prompt %d tokens in %.0f ms (%.1f tokens/s), generated %d tokens in %.0f ms (%.1f tokens/s), "
               "first token after %.0f ms; finish: %s%s%s\n",
               t.prompt_tokens, t.prompt_ms, t.prompt_per_second(), t.generated_tokens, t.generate_ms,
               t.generate_per_second(), t.first_token_ms, finish_reason_name(r.finish),
               r.finish == FinishReason::cancelled ? " (" : "",
               r.finish == FinishReason::cancelled ? (std::string(cancel_reason_name(r.cancel_reason)) + ")").c_str() : "");
}

// Sized before loading: refuse what cannot fit rather than swap or be
// killed. Without --ctx the context is 4096, or the training context if
// that is smaller, which only the file says: then a second estimate. Sets
// so.n_ctx; returns what the file says of itself.
ModelInfo size_before_loading(const Args& a, const ModelLoad& load, SessionOptions& so) {
  const int32_t threads = a.threads > 0 ? a.threads : default_threads();
  ModelInfo info;
  so.n_ctx = a.ctx > 0 ? a.ctx : 4096;
  MemoryEstimate e;
  if (a.trust_models) {
    e = estimate_memory(load, session_context_params(so, 0, threads), &info);
  } else {
    // In a child first: a file that makes llama.cpp abort ends that child,
    // and this one says what was wrong (runtime/vetter.h).
    Vetter vetter(VetterOptions{.program = Vetter::this_program()});
    VetRequest q;
    q.path = load.path;
    q.n_gpu_layers = load.n_gpu_layers;
    q.context = session_context_params(so, 0, threads);
    VetReport r = vetter.vet(q);
    e = r.estimate;
    info = r.info;
  }
  if (a.ctx == 0 && info.n_ctx_train > 0 && info.n_ctx_train < so.n_ctx) {
    so.n_ctx = info.n_ctx_train;
    e = estimate_memory(load, session_context_params(so, 0, threads));
  }
  check_memory_fits(e, "model '" + load.path + "' with a context of " + std::to_string(so.n_ctx) + " tokens");
  return info;
}

GenerateRequest request_of(const Args& a) {
  GenerateRequest req;
  req.max_tokens = a.n;
  req.stop = a.stop;
  req.sampling.temperature = a.temp;
  req.sampling.top_k = a.top_k;
  req.sampling.top_p = a.top_p;
  req.sampling.min_p = a.min_p;
  req.sampling.repeat_penalty = a.repeat_penalty;
  req.sampling.repeat_last_n = a.repeat_last_n;
  if (a.seed >= 0) req.sampling.seed = static_cast<uint32_t>(a.seed);
  validate(req.sampling);
  return req;
}

int run(const Args& a) {
  const int sources = !a.prompt.empty() + !a.file.empty() + !a.chat.empty();
  if (sources != 1) throw Error("give exactly one of -p PROMPT, -f FILE or --chat MESSAGE...");
  catch_interrupts();
  RuntimeOptions ro;
  ro.verbose = a.verbose;
  Runtime runtime(ro);

  ModelLoad load;
  load.path = a.model;
  if (load.path.empty()) {
    load.path = default_test_model();
    std::fprintf(stderr, "reclaim: no model given (-m): using the random-weight test model %s; its output is noise\n",
                 load.path.c_str());
  }
  load.mode = load_mode_from_name(a.load_mode);
  load.n_gpu_layers = a.gpu_layers;
  load.n_threads = a.threads;

  SessionOptions so;
  so.n_batch = a.batch;
  so.n_threads = a.threads;
  const ModelInfo info = size_before_loading(a, load, so);
  load.progress = load_progress(info.name.empty() ? load.path : info.name, &g_interrupt, stderr_is_terminal());

  GenerateRequest req = request_of(a);

  GenerateResult result;
  bool stdout_gone = false;
  try {
    Model model(load);
    if (!has_tokenizer(model.vocab())) {
      throw Error("model '" + load.path + "' has no tokenizer (llama.cpp's no_vocab): it takes token ids, not the text that reclaim run reads");
    }
    if (!a.chat.empty()) {
      std::vector<ChatMessage> msgs;
      if (!a.system.empty()) msgs.push_back({"system", a.system});
      for (size_t i = 0; i < a.chat.size(); ++i) msgs.push_back({i % 2 == 0 ? "user" : "assistant", a.chat[i]});
      req.prompt = apply_chat_template(model, msgs, a.chat_template);
    } else {
      req.prompt = a.file.empty() ? a.prompt : read_file(a.file);
    }
    // The request's own token: Ctrl-C cancels it through the link, and a
    // failed write to stdout cancels it directly.
    CancelToken cancel;
    cancel.link(&g_interrupt);
    Session session(model, so, &cancel);
    GenerateHooks hooks;
    if (!a.json) {
      hooks.on_text = [&](std::string_view text) {
        if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
          stdout_gone = true;
          cancel.cancel(CancelReason::client_gone);
        }
      };
    }
    try {
      result = generate(session, req, hooks);
    } catch (const ContextOverflow& e) {
      throw Error(std::string(e.what()) + " (give a larger --ctx or a smaller -n)");
    }
    if (a.json) {
      std::printf("%s\n", result_json(result, model).dump().c_str());
    } else if (!stdout_gone) {
      print_timings(result);
    }
  } catch (const LoadAborted&) {
    if (!g_interrupt.cancelled()) throw;
    std::fprintf(stderr, "reclaim: interrupted while loading; nothing is left loaded\n");
    return kExitInterrupted;
  }
  if (stdout_gone) return kExitStdoutGone;
  if (result.finish == FinishReason::cancelled && result.cancel_reason == CancelReason::interrupted) {
    std::fprintf(stderr, "reclaim: interrupted; the request and the model were released\n");
    return kExitInterrupted;
  }
  return 0;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto* sub = app.add_subcommand("run", "generate text from a prompt, streamed to stdout");
  auto a = std::make_shared<Args>();
  sub->add_option("-m,--model", a->model, "GGUF model (default: the cached test model, which writes noise)");
  sub->add_option("-p,--prompt", a->prompt, "prompt text (special tokens such as <|im_start|> are parsed)");
  sub->add_option("-f,--file", a->file, "read the prompt from this file");
  sub->add_option("--chat", a->chat, "chat messages, user first, alternating user/assistant; formatted with the chat template")
      ->expected(1, -1);
  sub->add_option("--system", a->system, "system message for --chat");
  sub->add_option("--chat-template", a->chat_template,
                  "template for --chat: a built-in name (chatml, llama3, ...) or template text; default: the model's");
  sub->add_option("-n,--max-tokens", a->n, "tokens to generate at most (-1: until the context is full)")->capture_default_str();
  sub->add_option("--temp", a->temp, "temperature (0: greedy)")->capture_default_str();
  sub->add_option("--top-k", a->top_k, "top-k (0: off)")->capture_default_str();
  sub->add_option("--top-p", a->top_p, "top-p (1: off)")->capture_default_str();
  sub->add_option("--min-p", a->min_p, "min-p (0: off)")->capture_default_str();
  sub->add_option("--repeat-penalty", a->repeat_penalty, "repeat penalty (1: off)")->capture_default_str();
  sub->add_option("--repeat-last-n", a->repeat_last_n, "tokens the repeat penalty looks back on")->capture_default_str();
  sub->add_option("--seed", a->seed, "sampling seed (default: random, printed with --json)")
      ->check(CLI::Range(int64_t{0}, int64_t{0xFFFFFFFE}));
  sub->add_option("--stop", a->stop, "stop when this text appears (repeatable); it is not printed")->take_all();
  sub->add_option("--ctx", a->ctx, "context size in tokens (default: 4096, or the model's training context if smaller)")
      ->check(CLI::Range(0, 1 << 24));
  sub->add_option("--threads", a->threads, "decode threads (0: all cores)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--batch", a->batch, "prompt tokens per decode step")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--load-mode", a->load_mode, "mmap, none, mlock or mmap-mlock")->capture_default_str();
  sub->add_option("--gpu-layers", a->gpu_layers, "layers on the accelerator (-1: all)")->capture_default_str();
  sub->add_flag("--json", a->json, "print one JSON object (text, tokens, finish reason, timings) instead of streaming");
  sub->add_flag("--verbose", a->verbose, "pass llama.cpp's log through to stderr");
  sub->add_flag("--trust-models", a->trust_models, "load the model without vetting it in a child process first");
  return [a] { return run(*a); };
}

}  // namespace reclaim::cli
