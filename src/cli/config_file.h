// `reclaim serve --config FILE`: each model's own settings, in TOML (read
// with toml++, Debian's libtomlplusplus-dev: a kept library with each value's
// line, which the errors name). The command line's flags are the defaults of
// every model; a table sets what differs:
//
//   [models."qwen2.5:7b"]
//   path = "/models/qwen2.5-7b-instruct-q4_k_m.gguf"   # required
//   aliases = ["qwen", "gpt-4o-mini"]
//   ctx = 8192            # each sequence's context (--ctx)
//   parallel = 2          # sequences, and requests at once (--parallel)
//   threads = 8
//   gpu_layers = 99
//   chat_template = "chatml"
//   system = "You are terse."   # the system message a chat without one gets
//   keep_alive = "30m"    # or seconds; -1: never unload
//   pin = true
//   preload = true
//
//   [models."qwen2.5:7b".defaults]   # what a request leaves out
//   temperature = 0.7
//   max_tokens = 512
//   stop = ["</answer>"]
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/registry.h"

namespace reclaim::cli {

// One line: "FILE:LINE: KEY: what is wrong".
class ConfigError : public Error {
 public:
  using Error::Error;
};

struct ServeConfig {
  std::vector<ModelSpec> models;  // in the file's order
};

// Throws ConfigError for the first mistake.
ServeConfig read_serve_config(const std::string& path);

// Why a request would refuse `value` as its `field` (a model's default),
// or "" when it takes it.
std::string request_default_refusal(const std::string& field, const nlohmann::json& value);

}  // namespace reclaim::cli
