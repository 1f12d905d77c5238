#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "audit/audit.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/ledger.h"
#include "engine/vet.h"

int main(int argc, char** argv) {
  reclaim::reexec_with_heap_tunables(argv);
  // The audit's child sides are this same program; they skip the CLI so that
  // nothing of it is in their baseline.
  if (argc == 4 && std::strcmp(argv[1], "__audit-side") == 0) {
    return reclaim::audit::audit_side_main(argv[2], argv[3]);
  }
  // The vetting child (runtime/vetter.h): a model file that crashes it
  // crashes only it.
  if (argc >= 2 && std::strcmp(argv[1], reclaim::kVetArg) == 0) return reclaim::vet_child_main(argc, argv);
  CLI::App app{"reclaim: an LLM runtime that gives back everything it takes"};
  app.require_subcommand(1);
  bool log_resources = false;
  app.add_flag("--log-resources", log_resources, "every acquire and release as one JSON line on stderr (RECLAIM_LOG=resources)");
  std::vector<std::pair<CLI::App*, reclaim::cli::Command>> commands;
  auto add = [&](reclaim::cli::Command (*fn)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    reclaim::cli::Command c = fn(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(c));
  };
  add(reclaim::cli::add_serve);
  add(reclaim::cli::add_ps);
  add(reclaim::cli::add_pull);
  add(reclaim::cli::add_run);
  add(reclaim::cli::add_audit);
  add(reclaim::cli::add_make_test_model);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (log_resources) {
    // Children (the audit's sides) read it from the environment.
    ::setenv("RECLAIM_LOG", "resources", 1);
    reclaim::Ledger::process().set_log(stderr);
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const reclaim::Error& e) {
    std::fprintf(stderr, "reclaim: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reclaim: internal error: %s\n", e.what());
    return 3;
  }
  return 2;
}
