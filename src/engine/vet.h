// Vetting a model file: everything a first load and a first request do to it,
// in a process that may die.
//
// A GGML_ASSERT inside llama.cpp ends the process it runs in, and a damaged
// file can reach one (tests/hostile_corpus_test.cpp has the cases). So the
// first load of each file runs here, in a child (runtime/vetter.h starts it
// as `PROGRAM __vet REQUEST`): reclaim's metadata checks, llama.cpp's
// simulated load and context plan (which is also the memory estimate the
// parent needs anyway), a real load with a tiny context, a decode of two
// tokens, and every token of the vocab turned back into text. A child that
// aborts leaves its verdict behind: ggml's abort callback writes the assert's
// message to stdout before the process ends.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <llama.h>
#include <nlohmann/json.hpp>

#include "engine/model_info.h"

namespace reclaim {

// The argument that makes a program the vetting child (see vet_child_main).
inline constexpr const char* kVetArg = "__vet";

// What a child does of the vetting. The parent runs the two parts in two
// children at once (runtime/vetter.cpp), so that a first load waits for the
// longer of them rather than for both.
enum class VetPart {
  whole,     // all of it, in order: what the fuzzer and a lone vet_here do
  estimate,  // the simulated load and the context plan
  decode,    // a real load, a small context, a decode and the tokenizer
};

struct VetRequest {
  std::string path;
  // Its image projector (engine/projector.h), vetted with it: the estimate
  // counts it, and the decode part loads it over the model and encodes an
  // image; empty: none.
  std::string mmproj;
  VetPart part = VetPart::whole;
  int32_t n_gpu_layers = -1;
  // The context the estimate plans (the server's batch or session context).
  llama_context_params context = llama_context_default_params();
  // false: llama.cpp meets the file without reclaim's checks first (engine/
  // gguf_check.h). For the fuzzer, which measures what the checks must
  // catch, and for showing that the child contains what they miss.
  bool checks = true;
};

struct VetReport {
  bool ok = false;
  std::string stage;  // where it failed: metadata, estimate, load, context, decode, tokenizer
  std::string error;  // what was wrong, naming the file
  MemoryEstimate estimate;
  ModelInfo info;
  bool has_tokenizer = false;  // false: token ids in and out only (llama.cpp's no_vocab)
  double ms = 0;               // how long the child's work took
  // Each stage's time, in order: `reclaim __vet REQUEST_JSON` prints them,
  // which is how the figures in runtime/vetter.cpp were measured.
  std::vector<std::pair<std::string, double>> stage_ms;
};

nlohmann::json to_json(const VetRequest& r);
VetRequest vet_request_from_json(const nlohmann::json& j);
nlohmann::json to_json(const VetReport& r);
VetReport vet_report_from_json(const nlohmann::json& j);

// What a part has learned before it ends, for a parent that can act on it
// at once (runtime/vetter.cpp): each is called at most once.
struct VetProgress {
  // The real load has succeeded (the decode part): from then on the file is
  // known to load, and the parent may load it too.
  std::function<void()> loaded;
  // The estimate is made (the estimate part), before its simulated model is
  // freed: the report as it will end unless the frees crash.
  std::function<void(const VetReport&)> estimated;
};

// Does the vetting (the request's part of it) in this process; a failure
// llama.cpp reports is a report with ok false, an assert ends the process.
// Needs a Runtime. The estimate, info and has_tokenizer come from the
// estimate part; the decode part's report has only its verdict. The
// metadata checks run in the decode part, before its real load, and in the
// whole: the estimate part's simulated load reads the file unchecked, which
// a child can afford, so that the two parts take about as long (bench/vet).
VetReport vet_here(const VetRequest& request, const VetProgress& progress = {});

// The lines a child prints as it goes (VetProgress): its real load has
// succeeded; its estimate is made (the report, or nullopt for another line).
bool is_loaded_line(const std::string& line);
std::optional<VetReport> estimated_report_in(const std::string& line);

// The child's main: `argv[1]` is kVetArg and `argv[2]` the request's JSON.
// Prints the report's JSON on one line of stdout; exits 0 whatever the
// verdict, 2 on a malformed request. A program that vets calls it first
// thing when argv[1] is kVetArg (reclaim's main and the engine tests do).
int vet_child_main(int argc, char** argv);

}  // namespace reclaim
