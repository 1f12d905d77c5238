// The images a request brings: decoded onto its scope's ledger and freed
// with it, and every hostile one refused by a BadImage that says which and
// why, before its pixels could cost anything.
#include "engine/images.h"

#include <gtest/gtest.h>

#include <chrono>

#include "core/ledger.h"
#include "engine/model.h"
#include "engine/projector.h"
#include "png.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::png;
using reclaim::testing::small_load;
using reclaim::testing::small_projector;
using reclaim::testing::small_seeing_load;

namespace {

// The BadImage that `files` make, its message; "" when they are taken.
std::string refusal(const Projector* projector, const std::vector<std::string>& files, const ImageLimits& limits = {}) {
  Scope request("request:images-test");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    RequestImages images(request, projector, files, limits);
  } catch (const BadImage& e) {
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "refused within a bound";
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Images, DecodedOntoTheRequestsLedgerAndFreedWithIt) {
  Model m(small_seeing_load());
  const uint64_t before = Ledger::process().totals().count;
  {
    Scope request("request:images-test");
    RequestImages images(request, m.projector(), {png(8, 8, 1), png(20, 10, 2), png(8, 8, 1)});
    ASSERT_EQ(images.size(), 3u);
    EXPECT_EQ(images.bytes(), (8u * 8 + 20 * 10 + 8 * 8) * 3);
    EXPECT_EQ(Ledger::process().totals().count, before + 3);
    ASSERT_EQ(images.ids().size(), 3u);
    EXPECT_EQ(images.ids()[0].size(), 64u) << "a SHA-256 in hex";
    EXPECT_EQ(images.ids()[0], images.ids()[2]) << "the same file, the same identity";
    EXPECT_NE(images.ids()[0], images.ids()[1]);
  }
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(Images, EachHostileOneIsABadImageSayingWhichAndWhy) {
  Model m(small_seeing_load());
  const Projector* p = m.projector();
  const uint64_t before = Ledger::process().totals().count;
  const std::string good = png(8, 8);
  std::string why = refusal(p, {good, "this is not an image"});
  EXPECT_TRUE(has(why, "image 2") && has(why, "not an image")) << why;
  // A truncated file: its header is whole, its pixels are not.
  why = refusal(p, {good.substr(0, good.size() / 2)});
  EXPECT_TRUE(has(why, "image 1") && has(why, "cannot be decoded")) << why;
  // After one decoded: the request's scope frees what it had.
  why = refusal(p, {good, png(16, 16, 3), good.substr(0, good.size() / 2)});
  EXPECT_TRUE(has(why, "image 3") && has(why, "cannot be decoded")) << why;
  // Decompression bombs: a header that claims what the decoder would not
  // allocate, and one under that but above the server's bound.
  why = refusal(p, {png(65535, 65535, 0, 1, 1)});
  EXPECT_TRUE(has(why, "image 1") && has(why, "more pixels")) << why;
  why = refusal(p, {good, png(5000, 5000, 0, 1, 1)});
  EXPECT_TRUE(has(why, "image 2") && has(why, "5000 x 5000")) << why;
  why = refusal(p, std::vector<std::string>(17, good));
  EXPECT_TRUE(has(why, "17 images")) << why;
  // Each within its own bound, too many pixels together: refused at the
  // image that goes over, by the headers alone (a decode of the five would
  // hold 240 MiB).
  why = refusal(p, std::vector<std::string>(5, png(4096, 4096, 0, 1, 1)));
  EXPECT_TRUE(has(why, "up to image 5") && has(why, "together")) << why;
  ImageLimits two;
  two.max_request_pixels = 2 * 16 * 16;
  EXPECT_EQ(refusal(p, {png(16, 16), png(16, 16)}, two), "");
  why = refusal(p, {png(16, 16), png(16, 16), png(8, 8)}, two);
  EXPECT_TRUE(has(why, "up to image 3")) << why;
  EXPECT_TRUE(has(refusal(p, std::vector<std::string>(3000, good)), "3000 images"));
  ImageLimits small;
  small.max_bytes = 1000;
  why = refusal(p, {good, png(64, 64)}, small);
  EXPECT_TRUE(has(why, "image 2") && has(why, "more than the")) << why;
  why = refusal(p, {std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)});
  EXPECT_TRUE(has(why, "WebP")) << why;
  why = refusal(p, {""});
  EXPECT_TRUE(has(why, "empty")) << why;
  why = refusal(nullptr, {good});
  EXPECT_TRUE(has(why, "takes no images")) << why;
  EXPECT_EQ(Ledger::process().totals().count, before) << "nothing of a refused request stays";
}
