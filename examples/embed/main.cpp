// Embeds libreclaim: loads a model under a scope of the program's own,
// generates, unloads, and prints the ledger at each step. It exits 1 if
// anything of the model is still on the ledger once it is unloaded.
//   embed MODEL.gguf [PROMPT]
#include <reclaim.h>

#include <cstdio>
#include <string>

namespace {

void print_ledger(const char* when) {
  const reclaim::Ledger& ledger = reclaim::Ledger::process();
  const reclaim::LedgerTotals total = ledger.totals();
  std::printf("%s: %llu entries, %llu bytes\n", when, static_cast<unsigned long long>(total.count),
              static_cast<unsigned long long>(total.bytes));
  for (const reclaim::LedgerEntry& e : ledger.entries()) {
    const std::string kind(reclaim::kind_name(e.kind));
    std::printf("  %-28s %-12s %12llu  %s\n", e.owner.c_str(), kind.c_str(),
                static_cast<unsigned long long>(e.bytes), e.label.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: embed MODEL.gguf [PROMPT]\n");
    return 2;
  }
  // glibc's heap tunables that give freed memory back (core/heap.h): this
  // re-executes the program once with them set.
  reclaim::reexec_with_heap_tunables(argv);
  try {
    reclaim::Runtime runtime;
    reclaim::Scope app("embed");
    reclaim::ModelLoad load;
    load.path = argv[1];
    reclaim::Model model(load, &app);
    {
      reclaim::SessionOptions options;
      options.n_ctx = 512;
      reclaim::Session session(model, options);
      reclaim::GenerateRequest request;
      request.prompt = argc > 2 ? argv[2] : "Once upon a time";
      request.max_tokens = 16;
      request.sampling.temperature = 0;
      const reclaim::GenerateResult result = reclaim::generate(session, request);
      std::printf("generated %d tokens\n", result.timings.generated_tokens);
      print_ledger("loaded, with a session");
    }
    model.unload();
    print_ledger("unloaded");
    for (const reclaim::LedgerEntry& e : reclaim::Ledger::process().entries()) {
      if (e.owner.rfind(app.path(), 0) == 0) {
        std::fprintf(stderr, "embed: still held after the unload: %s %s\n", e.owner.c_str(), e.label.c_str());
        return 1;
      }
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "embed: %s\n", ex.what());
    return 1;
  }
  return 0;
}
