// The engine tests share one Runtime, as a process does.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/llama_runtime.h"
#include "engine/vet.h"

int main(int argc, char** argv) {
  // This program is also the vetting child of the registry tests' vetter.
  if (argc >= 2 && std::strcmp(argv[1], reclaim::kVetArg) == 0) return reclaim::vet_child_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  reclaim::Runtime runtime;
  return RUN_ALL_TESTS();
}
