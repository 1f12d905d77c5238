// Each subcommand registers its options on the app and returns the function
// that runs it once parsed. The CLI is a thin layer: the work is in the library.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace reclaim::cli {

using Command = std::function<int()>;

Command add_audit(CLI::App& app);
Command add_make_test_model(CLI::App& app);
Command add_run(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_ps(CLI::App& app);
Command add_pull(CLI::App& app);

}  // namespace reclaim::cli
