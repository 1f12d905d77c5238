// A model's image projector: loaded by llama.cpp's mtmd beside the model,
// on the ledger under it, encoding images into the model's width, and gone
// with the model; a file that is no projector for it is refused by name.
#include "engine/projector.h"

#include <gtest/gtest.h>
#include <mtmd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "core/ledger.h"
#include "engine/llama_runtime.h"
#include "engine/model.h"
#include "sanitized.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::small_load;
using reclaim::testing::small_model;
using reclaim::testing::small_projector;

namespace {

struct ChunksFree {
  void operator()(mtmd_input_chunks* c) const { mtmd_input_chunks_free(c); }
};
struct BitmapFree {
  void operator()(mtmd_bitmap* b) const { mtmd_bitmap_free(b); }
};

// An image of `side` pixels a side whose colour follows `shade`.
std::unique_ptr<mtmd_bitmap, BitmapFree> image(uint32_t side, int shade) {
  std::vector<unsigned char> rgb(static_cast<size_t>(side) * side * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<unsigned char>((i * 7 + static_cast<size_t>(shade) * 31) % 251);
  return std::unique_ptr<mtmd_bitmap, BitmapFree>(mtmd_bitmap_init(side, side, rgb.data()));
}

// The embeddings of the one image in "an image: <marker>, described".
std::vector<float> embeddings(Projector& p, const mtmd_bitmap* bitmap, int32_t n_embd) {
  std::unique_ptr<mtmd_input_chunks, ChunksFree> chunks(mtmd_input_chunks_init());
  const std::string text = std::string("an image: ") + mtmd_default_marker() + ", described";
  const mtmd_input_text in{text.c_str(), text.size(), true, true};
  EXPECT_EQ(mtmd_tokenize(p.get(), chunks.get(), &in, &bitmap, 1), 0) << take_llama_errors();
  EXPECT_EQ(mtmd_input_chunks_size(chunks.get()), 3u) << "text, image, text";
  const mtmd_input_chunk* img = mtmd_input_chunks_get(chunks.get(), 1);
  EXPECT_EQ(mtmd_input_chunk_get_type(img), MTMD_INPUT_CHUNK_TYPE_IMAGE);
  TestProjectorSpec spec;
  const auto n = static_cast<size_t>(mtmd_input_chunk_get_n_tokens(img));
  EXPECT_EQ(n, static_cast<size_t>(test_projector_tokens(spec)));
  EXPECT_EQ(mtmd_encode_chunk(p.get(), img), 0);
  const float* out = mtmd_get_output_embd(p.get());
  return std::vector<float>(out, out + n * static_cast<size_t>(n_embd));
}

const LedgerEntry* entry_under(const std::vector<LedgerEntry>& all, const std::string& suffix) {
  for (const LedgerEntry& e : all) {
    if (e.owner.size() >= suffix.size() && e.owner.compare(e.owner.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return &e;
    }
  }
  return nullptr;
}

// What loading a 128-wide projector beside a 64-wide model says.
std::string wider_projector_refusal() {
  ModelLoad load = small_load("spm");
  load.mmproj = small_projector("spm", 128);
  try {
    Model m(load);
    ADD_FAILURE() << "a 128-wide projector loaded beside a 64-wide model";
  } catch (const InvalidModelFile& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Projector, LoadsBesideItsModelOnTheLedgerEncodesImagesAndGoesWithIt) {
  const uint64_t before = Ledger::process().totals().count;
  ModelLoad load = small_load("spm");
  load.mmproj = small_projector("spm");
  Model m(load);
  ASSERT_NE(m.projector(), nullptr);
  const std::vector<LedgerEntry> all = Ledger::process().entries();
  const LedgerEntry* e = entry_under(all, "/mmproj");
  ASSERT_NE(e, nullptr) << "the projector's entry under the model's scope";
  EXPECT_EQ(e->owner, m.scope().path() + "/mmproj");
  // Its f32 weights alone: patch and position embeddings and the two layers.
  const uint64_t weights = (16 * 16 * 3 * 32 + 32 * 16 + 32 * 64 + 64 + 64 * 64 + 64) * sizeof(float);
  // A sanitizer's heap is its own, which the ledger's measure does not see.
  if (!reclaim::testing::sanitized()) EXPECT_GE(e->all_bytes(), weights);
  EXPECT_EQ(e->all_bytes(), m.projector()->bytes());

  auto grey = image(64, 1), other = image(64, 2), small = image(3, 1);
  const std::vector<float> a = embeddings(*m.projector(), grey.get(), 64);
  const std::vector<float> b = embeddings(*m.projector(), other.get(), 64);
  const std::vector<float> c = embeddings(*m.projector(), small.get(), 64);  // resized to the projector's size
  ASSERT_EQ(a.size(), 16u * 64);
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NE(a, b) << "another image, other embeddings";
  EXPECT_EQ(a.size(), c.size());
  EXPECT_EQ(embeddings(*m.projector(), grey.get(), 64), a) << "the same image, the same embeddings";

  m.unload();
  EXPECT_EQ(Ledger::process().totals().count, before) << "the projector goes with its model";
}

TEST(Projector, OneOfAnotherWidthIsRefusedNamingItAndLeavesNothing) {
  const uint64_t before = Ledger::process().totals().count;
  const std::string what = wider_projector_refusal();
  EXPECT_NE(what.find(small_projector("spm", 128)), std::string::npos) << what;
  EXPECT_NE(what.find("n_embd"), std::string::npos) << what;
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(Projector, AFileThatIsNoProjectorIsRefusedNamingIt) {
  const uint64_t before = Ledger::process().totals().count;
  ModelLoad load = small_load("spm");
  load.mmproj = small_model("bpe");  // a text model
  EXPECT_THROW(
      {
        try {
          Model m(load);
        } catch (const InvalidModelFile& e) {
          EXPECT_NE(std::string(e.what()).find(load.mmproj), std::string::npos) << e.what();
          throw;
        }
      },
      InvalidModelFile);
  EXPECT_EQ(Ledger::process().totals().count, before);
}

// mtmd's estimate quiets mtmd's log while it runs and then puts back the
// callback it saw: two at once could put back the quiet one for good, and
// every projector's error after that lost its reason.
TEST(Projector, EstimatesAtOnceLeaveTheErrorsTheirReasons) {
  // Written before the threads start: small_projector writes it once, on
  // the thread that asks first.
  const std::string projector = small_projector("spm");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&projector] {
      for (int i = 0; i < 8; ++i) {
        MemoryEstimate e;
        add_projector_estimate(e, projector, 0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string what = wider_projector_refusal();
  EXPECT_NE(what.find("n_embd"), std::string::npos) << what;
}

TEST(Projector, TheTestProjectorIsTheSameBytesForTheSameSpec) {
  TestProjectorSpec s;
  s.n_embd_text = 64;
  const std::string a = reclaim::testing::temp_path("same-a-mmproj.gguf"), b = reclaim::testing::temp_path("same-b-mmproj.gguf");
  make_test_projector(s, a);
  make_test_projector(s, b);
  s.seed = 2;
  const std::string c = reclaim::testing::temp_path("same-c-mmproj.gguf");
  make_test_projector(s, c);
  auto bytes = [](const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    std::string out;
    for (int ch; f && (ch = std::fgetc(f)) != EOF;) out += static_cast<char>(ch);
    if (f) std::fclose(f);
    return out;
  };
  EXPECT_FALSE(bytes(a).empty());
  EXPECT_EQ(bytes(a), bytes(b));
  EXPECT_NE(bytes(a), bytes(c)) << "another seed, other weights";
  s.image_size = 40;
  EXPECT_THROW(make_test_projector(s, c), Error);
}
