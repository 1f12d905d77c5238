// The engine tests share one Runtime, as a process does.
#include <gtest/gtest.h>

#include "engine/runtime.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  reclaim::Runtime runtime;
  return RUN_ALL_TESTS();
}
