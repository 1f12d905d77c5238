// Where a test writes its files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace reclaim::testing {

// Each test process gets a folder of its own, removed when it exits. ctest runs the tests of one
// binary side by side, and a file that two of them rewrite under one name is torn under the
// other's reader: a model truncated while another process maps it fails to load.
inline const std::string& temp_dir() {
  struct Dir {
    std::string path;
    Dir() : path(::testing::TempDir() + "/reclaim-test." + std::to_string(::getpid())) {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return dir.path;
}

inline std::string temp_path(const std::string& name) { return temp_dir() + "/" + name; }

}  // namespace reclaim::testing
