// Runs `reclaim audit` with a JSON report and returns the report, for the
// tests that check what the audit says (audit_test.cpp, device_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.h"
#include "temp_path.h"

namespace reclaim::testing {

// The checks that failed, each after the scenario it is of: first in a
// failure's message, since CI keeps only the ends of a long output.
inline std::string failed_checks(const std::string& out) {
  std::string scenario, failed;
  for (size_t at = 0; at < out.size();) {
    const size_t end = std::min(out.find('\n', at), out.size());
    const std::string line = out.substr(at, end - at);
    if (line.rfind("scenario ", 0) == 0) scenario = line;
    if (line.find("  FAIL  ") != std::string::npos) failed += scenario + ": " + line + "\n";
    at = end + 1;
  }
  return failed.empty() ? std::string() : "failed checks:\n" + failed + "the whole output:\n";
}

inline nlohmann::json audit_json(const std::string& args, int expect_status) {
  // Tests run in parallel processes: each writes its own report.
  const std::string json = temp_path("audit_out.json");
  std::remove(json.c_str());
  Result r = run("audit " + args + " --json " + json);
  EXPECT_EQ(r.status, expect_status) << failed_checks(r.out) << r.out;
  std::ifstream f(json);
  if (!f) return {};
  nlohmann::json j = nlohmann::json::parse(f);
  std::remove(json.c_str());
  return j;
}

}  // namespace reclaim::testing
