#include "engine/vet.h"

#include <mtmd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/arena.h"
#include "core/defer.h"
#include "engine/devices.h"
#include "engine/gguf_check.h"
#include "engine/owners.h"
#include "engine/projector.h"
#include "engine/llama_runtime.h"

namespace reclaim {

using nlohmann::json;

namespace {

const char* part_name(VetPart p) {
  switch (p) {
    case VetPart::estimate: return "estimate";
    case VetPart::decode: return "decode";
    case VetPart::whole: break;
  }
  return "whole";
}

VetPart part_named(const std::string& name) {
  if (name == "whole") return VetPart::whole;
  if (name == "estimate") return VetPart::estimate;
  if (name == "decode") return VetPart::decode;
  throw Error("unknown vetting part '" + name + "'");
}

}  // namespace

nlohmann::json to_json(const VetRequest& r) {
  const llama_context_params& c = r.context;
  return {{"path", r.path},
          {"mmproj", r.mmproj},
          {"part", part_name(r.part)},
          {"n_gpu_layers", r.n_gpu_layers},
          {"checks", r.checks},
          {"context",
           {{"n_ctx", c.n_ctx},
            {"n_batch", c.n_batch},
            {"n_ubatch", c.n_ubatch},
            {"n_seq_max", c.n_seq_max},
            {"n_threads", c.n_threads},
            {"n_threads_batch", c.n_threads_batch},
            {"n_outputs_max", c.n_outputs_max},
            {"n_outputs_max_per_seq", c.n_outputs_max_per_seq},
            {"kv_unified", c.kv_unified}}}};
}

VetRequest vet_request_from_json(const nlohmann::json& j) {
  VetRequest r;
  r.path = j.at("path").get<std::string>();
  r.mmproj = j.value("mmproj", "");
  r.part = part_named(j.value("part", "whole"));
  r.n_gpu_layers = j.at("n_gpu_layers").get<int32_t>();
  r.checks = j.value("checks", true);
  const json& c = j.at("context");
  r.context.n_ctx = c.at("n_ctx").get<uint32_t>();
  r.context.n_batch = c.at("n_batch").get<uint32_t>();
  r.context.n_ubatch = c.at("n_ubatch").get<uint32_t>();
  r.context.n_seq_max = c.at("n_seq_max").get<uint32_t>();
  r.context.n_threads = c.at("n_threads").get<int32_t>();
  r.context.n_threads_batch = c.at("n_threads_batch").get<int32_t>();
  r.context.kv_unified = c.at("kv_unified").get<bool>();
  // The estimate must be of the context that will be made: its logits rows
  // size the compute buffer (session_context_params).
  r.context.n_outputs_max = c.value("n_outputs_max", 0u);
  r.context.n_outputs_max_per_seq = c.value("n_outputs_max_per_seq", 0u);
  return r;
}

// The figures and facts as they are named in C++, both ways.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MemoryEstimate, model_host, model_device, context_host, context_device, compute_host,
                                   compute_device, model_overhead, context_overhead, exact, device_by_name)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ModelInfo, path, architecture, name, chat_template, n_params, tensor_bytes, file_bytes,
                                   load_mode, n_ctx_train, n_layer, n_embd, n_vocab, has_tokenizer)

nlohmann::json to_json(const VetReport& r) {
  return {{"ok", r.ok},
          {"stage", r.stage},
          {"error", r.error},
          {"ms", r.ms},
          {"stage_ms", r.stage_ms},
          {"has_tokenizer", r.has_tokenizer},
          {"estimate", r.estimate},
          {"info", r.info}};
}

VetReport vet_report_from_json(const nlohmann::json& j) {
  VetReport r;
  r.ok = j.at("ok").get<bool>();
  r.stage = j.value("stage", "");
  r.error = j.value("error", "");
  r.ms = j.value("ms", 0.0);
  if (j.contains("stage_ms")) r.stage_ms = j["stage_ms"].get<std::vector<std::pair<std::string, double>>>();
  r.has_tokenizer = j.value("has_tokenizer", false);
  if (j.contains("estimate")) r.estimate = j["estimate"].get<MemoryEstimate>();
  if (j.contains("info")) r.info = j["info"].get<ModelInfo>();
  return r;
}

namespace {

// For the abort callback, which gets only ggml's message.
std::atomic<const char*> g_stage{"start"};
std::string g_path;

// ggml calls this with the assert's "file:line: message" and then aborts; the
// verdict is written with write(2), the one call that cannot be lost in a
// stdio buffer the abort never flushes.
void write_line(const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void on_ggml_abort(const char* message) {
  json j = {{"ok", false},
            {"stage", g_stage.load()},
            {"error", "model file '" + g_path + "' makes llama.cpp abort at the " + g_stage.load() + " stage: " + message}};
  write_line(j.dump() + "\n");
}

constexpr const char* kLoadedLine = R"({"loaded":true})";
constexpr const char* kEstimatedKey = "estimated";

std::string llama_reason() {
  std::string why = take_llama_errors();
  return why.empty() ? "llama.cpp gave no reason" : why;
}

// The smallest context a request's two batch shapes fit in.
llama_context* small_context(llama_model* model, const std::string& path) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 8;
  cp.n_seq_max = 1;
  // One thread: from here on the parent's own load runs beside this child,
  // and on two cores a second thread here only slowed it (bench/vet: first
  // loads 1.2-1.4x with two threads, 1.03-1.13x with one).
  cp.n_threads = cp.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) throw InvalidModelFile("cannot create a context for '" + path + "': " + llama_reason());
  return ctx;
}

// Two tokens as a prompt, then one as a generation step: the two shapes of
// batch a request decodes.
void decode_a_little(llama_context* ctx, const llama_vocab* vocab, const std::string& path) {
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  const llama_token bos = llama_vocab_bos(vocab);
  llama_token prompt[2] = {bos >= 0 && bos < n_vocab ? bos : 0, n_vocab > 1 ? 1 : 0};
  llama_batch b = llama_batch_get_one(prompt, 2);
  if (int rc = llama_decode(ctx, b); rc != 0) {
    throw InvalidModelFile("model file '" + path + "' cannot decode a prompt (llama_decode returned " + std::to_string(rc) +
                           "): " + llama_reason());
  }
  llama_token next = n_vocab > 2 ? 2 : 0;
  b = llama_batch_get_one(&next, 1);
  if (int rc = llama_decode(ctx, b); rc != 0) {
    throw InvalidModelFile("model file '" + path + "' cannot decode a token (llama_decode returned " + std::to_string(rc) +
                           "): " + llama_reason());
  }
  if (!llama_get_logits_ith(ctx, -1)) throw InvalidModelFile("model file '" + path + "' gives no logits");
}

// Every token back to text, as a stream of generated tokens would, and a
// sentence through the tokenizer, with the special tokens parsed as a chat
// template's are.
void use_the_tokenizer(const llama_vocab* vocab) {
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<char> buf(256);
  for (llama_token t = 0; t < n_vocab; ++t) {
    int32_t n = llama_token_to_piece(vocab, t, buf.data(), static_cast<int32_t>(buf.size()), 0, false);
    if (n < 0) {
      buf.resize(static_cast<size_t>(-n));
      (void)llama_token_to_piece(vocab, t, buf.data(), static_cast<int32_t>(buf.size()), 0, false);
    }
  }
  const char* text = "Hello, world! 123 <|im_start|>user\nWhy?<|im_end|>\n";
  std::vector<llama_token> tokens(256);
  (void)llama_tokenize(vocab, text, static_cast<int32_t>(std::strlen(text)), tokens.data(),
                       static_cast<int32_t>(tokens.size()), true, true);
}

// The projector loaded over the model as the server loads it (its warm-up
// builds and reserves its graph), then a small image encoded: where a
// damaged projector makes mtmd assert, it does so here.
void encode_an_image(llama_model* model, const std::string& path, int32_t n_gpu_layers) {
  check_model_file(path);
  const mtmd_context_params p = projector_params(n_gpu_layers, 1);
  take_llama_errors();
  mtmd_context* mtmd = mtmd_init_from_file(path.c_str(), model, p);
  if (!mtmd) {
    const std::string why = take_llama_errors();
    throw InvalidModelFile("projector '" + path + "' cannot be used with this model: " +
                           (why.empty() ? "llama.cpp's mtmd gave no reason" : why));
  }
  Defer free_mtmd([mtmd] { mtmd_free(mtmd); });
  if (!mtmd_support_vision(mtmd)) return;  // an audio projector: no image to encode
  std::vector<unsigned char> grey(32 * 32 * 3, 128);
  mtmd_bitmap* bitmap = mtmd_bitmap_init(32, 32, grey.data());
  if (!bitmap) throw Error("cannot allocate an image to vet projector '" + path + "'");
  Defer free_bitmap([bitmap] { mtmd_bitmap_free(bitmap); });
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  if (!chunks) throw std::bad_alloc();
  Defer free_chunks([chunks] { mtmd_input_chunks_free(chunks); });
  const std::string text = std::string("a ") + mtmd_default_marker() + " b";
  const mtmd_input_text in{text.c_str(), text.size(), true, true};
  const mtmd_bitmap* bitmaps[] = {bitmap};
  if (mtmd_tokenize(mtmd, chunks, &in, bitmaps, 1) != 0) {
    throw InvalidModelFile("projector '" + path + "' cannot prepare an image: " + take_llama_errors());
  }
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) continue;
    if (mtmd_encode_chunk(mtmd, c) != 0) {
      throw InvalidModelFile("projector '" + path + "' cannot encode an image: " + take_llama_errors());
    }
  }
}

}  // namespace

VetReport vet_here(const VetRequest& q, const VetProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  VetReport r;
  g_path = q.path;
  auto stage_start = t0;
  auto stage = [&](const char* s) {
    const auto now = std::chrono::steady_clock::now();
    if (!r.stage.empty()) r.stage_ms.emplace_back(r.stage, std::chrono::duration<double, std::milli>(now - stage_start).count());
    stage_start = now;
    g_stage = s;
    r.stage = s;
  };
  try {
    stage("metadata");
    check_model_file(q.path);
    if (q.checks && q.part != VetPart::estimate) {
      // The parse's blocks (every token's string) in huge pages, as a load's
      // are: a fresh child would fault them in by 4 KiB.
      ArenaWindow window;
      check_gguf_metadata(q.path);
    }

    if (q.part != VetPart::decode) {
      stage("estimate");
      ModelLoad load;
      load.path = q.path;
      load.n_gpu_layers = q.n_gpu_layers;
      const auto tell = [&](const MemoryEstimate& e) {
        if (!progress.estimated) return;
        VetReport early = r;
        // The parent keeps no template text of a verdict, and a hostile
        // file's would take the child's stdout bound twice over.
        early.info.chat_template.clear();
        early.ok = true;
        early.estimate = e;
        early.has_tokenizer = r.info.has_tokenizer;
        progress.estimated(early);
      };
      const bool projector = !q.mmproj.empty();
      r.estimate = estimate_memory(load, q.context, &r.info, projector ? nullptr : std::function<void(const MemoryEstimate&)>(tell));
      if (projector) {
        // Named as the projector's: an abort here is its file's.
        stage("projector estimate");
        g_path = q.mmproj;
        add_projector_estimate(r.estimate, q.mmproj, q.n_gpu_layers);
        g_path = q.path;
        tell(r.estimate);
      }
      r.has_tokenizer = r.info.has_tokenizer;
    }
    if (q.part != VetPart::estimate) {
      stage("load");
      llama_model_params mp = llama_model_default_params();
      mp.n_gpu_layers = q.n_gpu_layers;
      take_llama_errors();
      // In the load's arena of huge pages, as the parent's own load is
      // (engine/owners.h): the vocab's blocks fault in by 2 MiB, not 4 KiB.
      llama_model* model = load_in_arena(q.path, mp);
      if (!model) throw InvalidModelFile("cannot load model '" + q.path + "': " + llama_reason());
      Defer free_model([model] { llama_model_free(model); });
      const llama_vocab* vocab = llama_model_get_vocab(model);
      if (progress.loaded) progress.loaded();

      stage("context");
      llama_context* ctx = small_context(model, q.path);
      Defer free_ctx([ctx] { llama_free(ctx); });

      stage("decode");
      decode_a_little(ctx, vocab, q.path);

      // After the parent was told the file loads: the parent's own load
      // runs beside this.
      if (llama_vocab_type(vocab) != LLAMA_VOCAB_TYPE_NONE) {
        stage("tokenizer");
        use_the_tokenizer(vocab);
      }
      if (!q.mmproj.empty()) {
        stage("projector");
        g_path = q.mmproj;
        encode_an_image(model, q.mmproj, q.n_gpu_layers);
        g_path = q.path;
      }
    }
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = e.what();
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  stage("");
  r.ok = true;
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

bool is_loaded_line(const std::string& line) { return line == kLoadedLine; }

std::optional<VetReport> estimated_report_in(const std::string& line) {
  if (line.rfind(std::string("{\"") + kEstimatedKey + "\":", 0) != 0) return std::nullopt;
  try {
    const json j = json::parse(line);
    return vet_report_from_json(j.at(kEstimatedKey));
  } catch (const std::exception&) {
    return std::nullopt;  // a line the child did not finish
  }
}

int vet_child_main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], kVetArg) != 0) {
    std::fprintf(stderr, "usage: %s %s REQUEST_JSON\n", argc > 0 ? argv[0] : "reclaim", kVetArg);
    return 2;
  }
  VetRequest q;
  try {
    q = vet_request_from_json(json::parse(argv[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: malformed request: %s\n", kVetArg, e.what());
    return 2;
  }
  ggml_set_abort_callback(on_ggml_abort);
  Runtime runtime;
  VetProgress progress;
  progress.loaded = [] { write_line(std::string(kLoadedLine) + "\n"); };
  progress.estimated = [](const VetReport& early) { write_line(json{{kEstimatedKey, to_json(early)}}.dump() + "\n"); };
  VetReport r = vet_here(q, progress);
  // The parent keeps no template text of a verdict, and a file's of over
  // 16 MiB would cut the line at the child's stdout bound: no verdict, and
  // the file vetted again at each load.
  r.info.chat_template.clear();
  const std::string line = to_json(r).dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace reclaim
