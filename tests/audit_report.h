// Runs `reclaim audit` with a JSON report and returns the report, for the
// tests that check what the audit says (audit_test.cpp, device_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_support.h"
#include "temp_path.h"

namespace reclaim::testing {

inline nlohmann::json audit_json(const std::string& args, int expect_status) {
  // Tests run in parallel processes: each writes its own report.
  const std::string json = temp_path("audit_out.json");
  std::remove(json.c_str());
  Result r = run("audit " + args + " --json " + json);
  EXPECT_EQ(r.status, expect_status) << r.out;
  std::ifstream f(json);
  if (!f) return {};
  nlohmann::json j = nlohmann::json::parse(f);
  std::remove(json.c_str());
  return j;
}

}  // namespace reclaim::testing
