// ggml's large CPU buffers go through engine/ggml_buffers.cpp: mapped for
// themselves in huge-page-aligned blocks, counted as heap, unmapped on free.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/heap.h"
#include "core/usage.h"
#include "engine/model.h"
#include "engine/session.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::small_model;

namespace {

struct Range {
  uintptr_t start = 0, end = 0;
};

std::vector<Range> anonymous_maps_of_at_least(size_t bytes) {
  std::vector<Range> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    Range r;
    char dash = 0;
    std::istringstream in(line);
    in >> std::hex >> r.start >> dash >> r.end;
    // Anonymous: no path after the inode column.
    std::string perms, offset, dev, inode, path;
    in >> perms >> offset >> dev >> inode >> path;
    if (path.empty() && r.end - r.start >= bytes) out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(GgmlBuffers, AContextsComputeBufferIsItsOwnAlignedMappingAndGoesWithIt) {
  ModelLoad l;
  l.path = small_model("spm");
  Model model(l);
  SessionOptions so;
  // A ubatch of 4096 tokens, for a compute buffer over 32 MiB: a generating
  // context keeps one row of logits, so its buffer grows with the batch.
  so.n_ctx = 4096;
  so.n_batch = 4096;
  const size_t big = size_t{32} << 20;
  const std::vector<Range> before = anonymous_maps_of_at_least(big);
  const Usage u0 = Usage::capture();
  std::vector<Range> during;
  int64_t heap_during = 0;
  {
    Session s(model, so);
    during = anonymous_maps_of_at_least(big);
    heap_during = static_cast<int64_t>(heap_stats().in_use);
  }
  ASSERT_GT(during.size(), before.size()) << "no mapping of 32 MiB or more appeared for the compute buffer";
  for (const Range& r : during) {
    bool old = false;
    for (const Range& b : before) old = old || (b.start == r.start && b.end == r.end);
    if (old) continue;
    EXPECT_EQ(r.start % (2u << 20), 0u) << std::hex << r.start << " is not 2 MiB-aligned";
    EXPECT_EQ((r.end - r.start) % (2u << 20), 0u);
  }
  EXPECT_GE(heap_during - u0.heap_in_use, static_cast<int64_t>(big)) << "the mapping is not counted as heap";
  const Usage u1 = Usage::capture();
  EXPECT_EQ(anonymous_maps_of_at_least(big).size(), before.size());
  EXPECT_EQ(u1.maps, u0.maps);
  EXPECT_LT(u1.heap_in_use - u0.heap_in_use, int64_t{1} << 20);
}
