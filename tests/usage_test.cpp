#include "core/usage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "core/size.h"
#include "temp_path.h"

using namespace reclaim;

TEST(Usage, CountsFds) {
  Usage a = Usage::capture();
  int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  Usage b = Usage::capture();
  ::close(fd);
  Usage c = Usage::capture();
  EXPECT_EQ((b - a).fds, 1);
  EXPECT_EQ((c - a).fds, 0);
}

TEST(Usage, CountsThreads) {
  Usage a = Usage::capture();
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop) std::this_thread::yield();
  });
  Usage b = Usage::capture();
  stop = true;
  t.join();
  EXPECT_EQ((b - a).threads, 1);
}

TEST(Usage, SeesAnonMemoryAndMappings) {
  const size_t n = 8 << 20;
  Usage a = Usage::capture();
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, n);
  Usage b = Usage::capture();
  ::munmap(p, n);
  Usage c = Usage::capture();
  EXPECT_GE((b - a).anon, static_cast<int64_t>(n) - (256 << 10));
  EXPECT_GE((b - a).maps, 1);
  EXPECT_LT((c - a).anon, 256 << 10);
}

TEST(Usage, SeesMappedModelFiles) {
  std::string path = reclaim::testing::temp_path("usage_test_model.gguf");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  Usage a = Usage::capture();
  void* p = ::mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  Usage b = Usage::capture();
  ::munmap(p, 1 << 20);
  ::close(fd);
  ::unlink(path.c_str());
  EXPECT_EQ((b - a).model_maps, 1);
  EXPECT_EQ((b - a).model_mapped, 1 << 20);
}

TEST(Usage, SeesLockedMemory) {
  const size_t n = 64 << 10;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  Usage a = Usage::capture();
  if (::mlock(p, n) != 0) {
    ::munmap(p, n);
    GTEST_SKIP() << "mlock not permitted here";
  }
  Usage b = Usage::capture();
  ::munlock(p, n);
  ::munmap(p, n);
  EXPECT_EQ((b - a).locked, static_cast<int64_t>(n));
}

TEST(Usage, SeesHeap) {
  Usage a = Usage::capture();
  void* p = std::malloc(256 << 10);
  std::memset(p, 1, 256 << 10);
  asm volatile("" : : "r"(p) : "memory");  // keep the block: the compiler may drop a malloc/free pair
  Usage b = Usage::capture();
  std::free(p);
  EXPECT_GE((b - a).heap_in_use, 256 << 10);
}

TEST(Usage, MaxOfIsFieldWise) {
  Usage a, b;
  a.rss = 10;
  a.fds = 1;
  b.rss = 5;
  b.fds = 7;
  Usage m = max_of(a, b);
  EXPECT_EQ(m.rss, 10);
  EXPECT_EQ(m.fds, 7);
}

TEST(Size, ParsesAndFormats) {
  EXPECT_EQ(parse_size("300MiB"), 300ll << 20);
  EXPECT_EQ(parse_size("1.5G"), 3ll << 29);
  EXPECT_EQ(parse_size("64KiB"), 64 << 10);
  EXPECT_EQ(parse_size("4096"), 4096);
  EXPECT_EQ(parse_size("0"), 0);
  EXPECT_THROW(parse_size("lots"), std::runtime_error);
  EXPECT_THROW(parse_size("12 parsecs"), std::runtime_error);
  EXPECT_THROW(parse_size("-1MiB"), std::runtime_error);
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(format_bytes(-(2 << 10)), "-2.0 KiB");
}

TEST(Usage, ReadsSwapAsTheKernelReportsIt) {
  // Only a machine with swap and memory pressure has any; the figure must be
  // the kernel's VmSwap whatever it is.
  std::ifstream status("/proc/self/status");
  int64_t kernel = -1;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSwap:", 0) == 0) kernel = std::stoll(line.substr(7)) * 1024;
  }
  ASSERT_GE(kernel, 0) << "no VmSwap line in /proc/self/status";
  EXPECT_EQ(Usage::capture().swap, kernel);
}

// Two threads that capture at once, as the server's history sampler and its
// baseline or /v1/resources do: neither counts the files the other opened
// for a moment to read /proc.
TEST(Usage, CapturesBesideEachOtherCountTheSameDescriptors) {
  const int64_t fds = Usage::capture().fds;
  std::atomic<int64_t> least{fds}, most{fds};
  auto capture = [&] {
    for (int i = 0; i < 3000; ++i) {
      const int64_t n = Usage::capture().fds;
      for (int64_t l = least.load(); n < l && !least.compare_exchange_weak(l, n);) {
      }
      for (int64_t m = most.load(); n > m && !most.compare_exchange_weak(m, n);) {
      }
    }
  };
  std::thread a(capture), b(capture);
  a.join();
  b.join();
  EXPECT_EQ(least.load(), fds);
  EXPECT_EQ(most.load(), fds);
}
