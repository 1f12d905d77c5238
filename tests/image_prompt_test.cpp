// A prompt with images on a batch: each image a run of stand-ins named by
// its file, decoded by the projector into its request's cells as mtmd's own
// evaluation decodes it, beside other requests as alone, reused by the
// prompt cache only where the image is the same, and leaving nothing of
// itself however it ends.
#include "engine/image_prompt.h"

#include <gtest/gtest.h>
#include <mtmd-helper.h>
#include <mtmd.h>

#include <cmath>
#include <filesystem>
#include <future>

#include "batch_checks.h"
#include "core/ledger.h"
#include "engine/batcher.h"
#include "engine/model.h"
#include "engine/projector.h"
#include "png.h"
#include "sanitized.h"
#include "small_models.h"

using namespace reclaim;
using reclaim::testing::eventually;
using reclaim::testing::expect_as_alone;
using reclaim::testing::judged;
using reclaim::testing::png;
using reclaim::testing::request_entries;
using reclaim::testing::sequence_empty;
using reclaim::testing::small_load;
using reclaim::testing::small_projector;
using reclaim::testing::small_seeing_load;
using reclaim::testing::small_session;

namespace {

std::string with_image(const std::string& before, const std::string& after) {
  return before + image_marker() + after;
}

GenerateRequest image_request(const std::string& prompt, std::vector<std::string> images, int max_tokens = 12) {
  GenerateRequest r;
  r.prompt = prompt;
  r.images = std::move(images);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return judged(r);
}

BatcherOptions batching(int n_seq) { return {n_seq, small_session(256)}; }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::string image_refusal(Model& m, const std::string& text, const std::vector<std::string>& files) {
  Scope request("request:image-prompt-test");
  try {
    ImagePrompt p(request, *m.projector(), text, files, true);
  } catch (const BadImage& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ImagePrompt, EachImageIsARunOfStandInsNamedByItsFile) {
  Model m(small_seeing_load());
  const std::string a = png(8, 8, 1), b = png(12, 9, 2);
  Scope request("request:image-prompt-test");
  const ImagePrompt p(request, *m.projector(), "one " + std::string(image_marker()) + " two " + image_marker() + " three " +
                                                   image_marker() + " end",
                      {a, b, a}, true);
  ASSERT_EQ(p.images().size(), 3u);
  EXPECT_TRUE(p.positions_are_indices()) << "llava's projector keeps one position an embedding";
  const auto run = [&](size_t i) {
    const ImageSpan& s = p.images()[i];
    return std::vector<llama_token>(p.tokens().begin() + s.start, p.tokens().begin() + s.start + s.n_tokens);
  };
  for (size_t i = 0; i < 3; ++i) {
    const ImageSpan& s = p.images()[i];
    EXPECT_EQ(s.n_tokens, 16) << "a 64-pixel projector of 16-pixel patches";
    EXPECT_EQ(s.n_pos, s.n_tokens);
    for (llama_token t : run(i)) EXPECT_TRUE(is_image_token(t));
    EXPECT_FALSE(is_image_token(p.tokens()[static_cast<size_t>(s.start - 1)])) << "text before it";
  }
  EXPECT_EQ(run(0), run(2)) << "the same file, the same stand-ins";
  EXPECT_NE(run(0)[0], run(1)[0]) << "another file differs at its first stand-in";
  EXPECT_FALSE(is_image_token(p.tokens().back()));
  bool preprocessed = false, decoded = false;
  for (const LedgerEntry& e : Ledger::process().entries()) {
    if (e.owner.rfind(request.path(), 0) != 0) continue;
    // Measured by the heap's growth, which a sanitizer's own heap hides.
    preprocessed |= e.label == "images, preprocessed" && (e.bytes > 0 || reclaim::testing::sanitized());
    decoded |= e.label.rfind("image ", 0) == 0 && e.label != "image embeddings";
  }
  EXPECT_TRUE(preprocessed) << "the preprocessed images are the request's";
  EXPECT_FALSE(decoded) << "the decoded pixels went once preprocessed";
}

TEST(ImagePrompt, AWrongCountOfPlacesOrAnImageLastIsABadImageAndLeavesNothing) {
  Model m(small_seeing_load());
  const uint64_t before = Ledger::process().totals().count;
  const std::string a = png(8, 8, 1);
  std::string why = image_refusal(m, "no place for it", {a});
  EXPECT_TRUE(has(why, "0 places") && has(why, "1 images")) << why;
  why = image_refusal(m, with_image("two places ", " ") + image_marker(), {a});
  EXPECT_TRUE(has(why, "2 places")) << why;
  why = image_refusal(m, with_image("describe: ", ""), {a});
  EXPECT_TRUE(has(why, "ends with an image")) << why;
  why = image_refusal(m, with_image("a broken one: ", " end"), {a.substr(0, a.size() / 2)});
  EXPECT_TRUE(has(why, "image 1") && has(why, "cannot be decoded")) << why;
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(ImagePrompt, APrefixNeverEndsInsideAnImage) {
  const std::vector<llama_token> t = {5, 6, -7, -8, -9, 10, -11, -12, 13};
  EXPECT_EQ(image_start_before(t, 2), 2) << "at an image's start";
  EXPECT_EQ(image_start_before(t, 3), 2);
  EXPECT_EQ(image_start_before(t, 4), 2);
  EXPECT_EQ(image_start_before(t, 5), 5) << "right after it";
  EXPECT_EQ(image_start_before(t, 7), 6);
  EXPECT_EQ(image_start_before(t, 9), 9);
  EXPECT_EQ(image_start_before(t, 0), 0);
}

// The first token's log-probabilities, by the batch and by mtmd's own
// evaluation of the same prompt (mtmd_helper_eval_chunks) on a plain context.
TEST(VisionBatch, AnImagePromptDecodesAsMtmdsOwnEvaluation) {
  Model m(small_seeing_load());
  Batcher& batch = m.start_batcher(batching(2));
  const std::string text = with_image("Look: ", " What is it?");
  const GenerateResult got = batch.generate(image_request(text, {png(40, 30, 3)}, 1));
  ASSERT_EQ(got.logprobs.size(), 1u);
  EXPECT_EQ(got.timings.prompt_tokens, 16 + static_cast<int32_t>(tokenize(m.vocab(), "Look: ", true).size()) +
                                           static_cast<int32_t>(tokenize(m.vocab(), " What is it?", false, true).size()))
      << "the text's tokens and the image's 16";

  Session s(m, small_session(256));
  mtmd_context* mtmd = m.projector()->get();
  const std::string file = png(40, 30, 3);
  mtmd_bitmap* bitmap =
      mtmd_helper_bitmap_init_from_buf(mtmd, reinterpret_cast<const unsigned char*>(file.data()), file.size(), false,
                                       mtmd_helper_init_opt_default())
          .bitmap;
  ASSERT_NE(bitmap, nullptr);
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const mtmd_input_text in{text.c_str(), text.size(), true, true};
  const mtmd_bitmap* bitmaps[] = {bitmap};
  ASSERT_EQ(mtmd_tokenize(mtmd, chunks, &in, bitmaps, 1), 0);
  llama_pos past = 0;
  ASSERT_EQ(mtmd_helper_eval_chunks(mtmd, s.context(), chunks, 0, 0, 256, true, &past), 0);
  EXPECT_EQ(past, got.timings.prompt_tokens);
  const float* logits = llama_get_logits_ith(s.context(), -1);
  const int32_t n_vocab = llama_vocab_n_tokens(m.vocab());
  int32_t best = 0;
  float top = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > top) top = logits[i], best = i;
  }
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - top));
  const float best_logprob = static_cast<float>(-std::log(sum));
  mtmd_input_chunks_free(chunks);
  mtmd_bitmap_free(bitmap);
  EXPECT_NEAR(got.logprobs[0].logprob, best_logprob, kLogitTolerance);
  // Another image, another answer: the image is read. The test models'
  // random weights make the first step's shift small, so over 8 steps.
  const GenerateResult one = batch.generate(image_request(text, {png(40, 30, 3)}, 8));
  const GenerateResult other = batch.generate(image_request(text, {png(64, 64, 90)}, 8));
  float moved = 0;
  for (size_t i = 0; i < std::min(one.logprobs.size(), other.logprobs.size()); ++i) {
    moved = std::max(moved, std::abs(one.logprobs[i].top[0].second - other.logprobs[i].top[0].second));
  }
  EXPECT_GT(moved, 4 * kLogitTolerance) << "another image, another answer";
  EXPECT_NEAR(got.logprobs[0].top[0].second, best_logprob, kLogitTolerance);
  if (std::abs(got.logprobs[0].top[0].second - got.logprobs[0].top[1].second) > 2 * kLogitTolerance) {
    EXPECT_EQ(got.tokens[0], best);
  }
}

TEST(VisionBatch, TwoImageRequestsAtOnceAreEachAsAlone) {
  Model m(small_seeing_load());
  const GenerateRequest r1 = image_request(with_image("First: ", " tell me"), {png(16, 16, 4)});
  const GenerateRequest r2 = image_request(with_image("A second prompt, longer: ", " and this") + image_marker() + " too",
                                           {png(64, 64, 5), png(20, 30, 6)});
  GenerateResult alone1, alone2;
  {
    Model solo(small_seeing_load());
    Batcher& b = solo.start_batcher(batching(1));
    alone1 = b.generate(r1);
    alone2 = b.generate(r2);
  }
  EXPECT_NE(alone1.logprobs[0].top[0].second, alone2.logprobs[0].top[0].second) << "the images count";
  Batcher& batch = m.start_batcher(batching(2));
  auto f1 = std::async(std::launch::async, [&] { return batch.generate(r1); });
  auto f2 = std::async(std::launch::async, [&] { return batch.generate(r2); });
  expect_as_alone(alone1, f1.get(), "the first, beside the second");
  expect_as_alone(alone2, f2.get(), "the second, beside the first");
  EXPECT_EQ(request_entries(), 0u);
}

TEST(VisionBatch, ANextTurnReusesItsImagesCellsAndAnotherImageDoesNot) {
  Model m(small_seeing_load());
  Batcher& batch = m.start_batcher(batching(1));
  const std::string first = with_image("Here is a picture: ", " Describe it.");
  const GenerateResult r1 = batch.generate(image_request(first, {png(30, 30, 7)}));
  ASSERT_NE(r1.finish, FinishReason::cancelled);
  const int32_t image_end = static_cast<int32_t>(tokenize(m.vocab(), "Here is a picture: ", true).size()) + 16;
  const std::string next = first + r1.text + " And now?";
  const GenerateResult r2 = batch.generate(image_request(next, {png(30, 30, 7)}));
  EXPECT_GE(r2.timings.cached_tokens, image_end) << "the conversation with its image, from the cache";
  const GenerateResult r3 = batch.generate(image_request(next, {png(30, 30, 8)}));
  EXPECT_LT(r3.timings.cached_tokens, image_end - 16 + 1) << "another image: only the text before it is reused";
  const GenerateResult again = batch.generate(image_request(next, {png(30, 30, 8)}));
  expect_as_alone(r3, again, "the other image's turn from its cache");
}

// A request stopped while the projector encodes its image stops the encode
// there, as a decode stops: the encode ran to its end before (seconds on a
// CPU for a large image of a real model), holding the batch's thread and any
// unload meanwhile.
TEST(VisionBatch, ARequestStoppedWhileItsImageEncodesStopsTheEncode) {
  // An encode long enough to be seen running: a wide patch embedding over
  // 2,304 patches.
  TestProjectorSpec spec;
  spec.n_embd_text = 64;
  spec.image_size = 768;
  spec.width = 8192;
  const std::string mmproj = reclaim::testing::temp_path("slow-encode-mmproj.gguf");
  make_test_projector(spec, mmproj);
  ModelLoad load = small_load("spm");
  load.mmproj = mmproj;
  load.n_threads = 2;  // the encode's second thread is the sign that it runs
  Model m(load);
  Batcher& batch = m.start_batcher({1, small_session(2304 + 64)});
  const uint64_t before = Ledger::process().totals().count;
  // Besides the threads now, the request's own; then the encode's.
  const size_t threads = thread_count() + 1;
  CancelToken cancel;
  GenerateRequest r = image_request(with_image("Picture: ", " end"), {png(64, 64, 5)}, 4);
  r.cache_prompt = false;
  auto done = std::async(std::launch::async, [&] { return batch.generate(r, {}, &cancel); });
  EXPECT_TRUE(eventually([&] { return thread_count() > threads; })) << "the encode was never seen running";
  cancel.cancel();
  const GenerateResult got = done.get();
  EXPECT_EQ(got.finish, FinishReason::cancelled);
  EXPECT_EQ(batch.encodes_stopped(), 1u) << "the encode ran to its end";
  EXPECT_TRUE(sequence_empty(batch, 0));
  EXPECT_EQ(Ledger::process().totals().count, before);
}

TEST(VisionBatch, ARequestCancelledAfterItsImageOrRefusedLeavesNothing) {
  Model m(small_seeing_load());
  Batcher& batch = m.start_batcher(batching(1));
  const uint64_t before = Ledger::process().totals().count;
  CancelToken cancel;
  GenerateHooks hooks;
  hooks.on_prompt_progress = [&](const PromptProgress& p) {
    if (p.processed > 0) cancel.cancel();
  };
  GenerateRequest r = image_request(with_image("Picture: ", " now a long answer please"), {png(64, 64, 9)}, 64);
  r.cache_prompt = false;
  const GenerateResult got = batch.generate(r, hooks, &cancel);
  EXPECT_EQ(got.finish, FinishReason::cancelled);
  EXPECT_TRUE(sequence_empty(batch, 0));
  EXPECT_EQ(Ledger::process().totals().count, before) << "its images, preprocessed and embedded, went with it";
  try {
    (void)batch.generate(image_request(with_image("Broken: ", " end"), {"not an image"}));
    ADD_FAILURE() << "a file that is no image is refused";
  } catch (const BadImage& e) {
    EXPECT_TRUE(has(e.what(), "image 1")) << e.what();
  }
  EXPECT_EQ(Ledger::process().totals().count, before);

  Model text_only(small_load("spm"));
  Batcher& plain = text_only.start_batcher(batching(1));
  try {
    (void)plain.generate(image_request(with_image("Picture: ", " end"), {png(8, 8)}));
    ADD_FAILURE() << "a model without a projector takes no image";
  } catch (const BadImage& e) {
    EXPECT_TRUE(has(e.what(), "no projector")) << e.what();
  }
  EXPECT_TRUE(eventually([&] { return request_entries() == 0; }));
}
