// Runs the real `reclaim audit` on small test models, as a user would, and
// checks what it reports; and proves that it fails when something leaks.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "arch_models.h"
#include "audit_report.h"
#include "cli_support.h"
#include "temp_path.h"

namespace {

using namespace reclaim::testing;

const nlohmann::json* check(const nlohmann::json& scenario, const std::string& name) {
  for (const auto& c : scenario["checks"]) {
    if (c["name"] == name) return &c;
  }
  return nullptr;
}

void expect_clean(const nlohmann::json& j) {
  ASSERT_TRUE(j.contains("scenarios"));
  for (const auto& s : j["scenarios"]) {
    for (const auto& c : s["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << s["scenario"] << ": " << c.dump();
    for (const auto& r : s["reclaim_residues"]) {
      EXPECT_LE(r["anon"].get<int64_t>(), 1 << 20) << s["scenario"];
      EXPECT_EQ(r["fds"].get<int64_t>(), 0) << s["scenario"];
      EXPECT_EQ(r["threads"].get<int64_t>(), 0) << s["scenario"];
      EXPECT_EQ(r["maps"].get<int64_t>(), 0) << s["scenario"];
      EXPECT_EQ(r["locked"].get<int64_t>(), 0) << s["scenario"];
      EXPECT_EQ(r["model_maps"].get<int64_t>(), 0) << s["scenario"];
    }
  }
}

}  // namespace

TEST(Audit, AllScenariosMeetTheThresholdsOnSpm) {
  nlohmann::json j = audit_json("-m " + spm() + " --scenario all --cycles 4", 0);
  expect_clean(j);
  EXPECT_EQ(j["scenarios"].size(), 14u);
}

TEST(Audit, AllScenariosMeetTheThresholdsOnBpe) {
  expect_clean(audit_json("-m " + bpe() + " --scenario all --cycles 4", 0));
}

// The architectures users run (arch_models.h), driven with token ids: every
// scenario, the serve path's included, on each kind of memory.
class AuditArch : public ::testing::TestWithParam<reclaim::testing::Arch> {};

TEST_P(AuditArch, AllScenariosMeetTheThresholds) {
  // One decode thread: ctest runs two tests at once on CI's two cores, and
  // two processes whose ggml workers spin for all cores took 2 min 22 s
  // for what one alone did in 1.6 s (`reclaim audit -m qwen3-dense.gguf
  // --scenario all --cycles 3`, twice at once).
  nlohmann::json j = audit_json(
      "-m " + reclaim::testing::arch_model(GetParam().file) + " --scenario all --cycles 3 --threads 1", 0);
  expect_clean(j);
  EXPECT_EQ(j["scenarios"].size(), 14u);
}

INSTANTIATE_TEST_SUITE_P(Archs, AuditArch, ::testing::ValuesIn(reclaim::testing::archs()), reclaim::testing::arch_name);

TEST(Audit, RecurrentStateOnTheServePathLeavesWhatRawLlamaLeaves) {
  // Side by side with plain llama.cpp doing the same work: one context with
  // a sequence a request, on recurrent (mamba2) and hybrid (lfm2) memory.
  for (const char* file : {"mamba2-dense", "lfm2-dense"}) {
    nlohmann::json j = audit_json("-m " + reclaim::testing::arch_model(file) +
                                      " --scenario serve,serve-cancel,serve-unload-cancel --cycles 3 --compare-raw --threads 1",
                                  0);
    expect_clean(j);
    for (const auto& s : j["scenarios"]) EXPECT_TRUE(s.contains("raw")) << file << " " << s["scenario"];
  }
}

TEST(Audit, LoadModesMeetTheThresholds) {
  // bpe with mlock is the case where llama.cpp itself leaves pages locked
  // (core/locked.h); spm with the rest.
  for (const char* mode : {"mlock", "mmap-mlock"}) {
    expect_clean(audit_json("-m " + bpe() + " --scenario load-prompt-free --cycles 3 --load-mode " + mode, 0));
  }
  expect_clean(audit_json("-m " + spm() + " --scenario load-prompt-free --cycles 3 --load-mode none", 0));
}

TEST(Audit, CompareRawShowsWhatRawLlamaKeeps) {
  nlohmann::json j = audit_json("-m " + bpe() + " --scenario load-free --cycles 3 --compare-raw", 0);
  ASSERT_EQ(j["scenarios"].size(), 1u);
  const auto& s = j["scenarios"][0];
  ASSERT_TRUE(s.contains("raw"));
  // The raw side keeps the freed vocab heap of a 151,936-token model resident;
  // the reclaim side gives it back.
  int64_t raw = s["raw_residues"].back()["anon"].get<int64_t>();
  int64_t ours = s["reclaim_residues"].back()["anon"].get<int64_t>();
  EXPECT_GT(raw, 4 << 20);
  EXPECT_LT(ours, 1 << 20);
  // Each side ran in its own process, with its own baseline.
  EXPECT_NE(s["raw"]["baseline"]["t"], s["reclaim"]["baseline"]["t"]);
}

TEST(Audit, FailsOnALeakedHeapBlock) {
  nlohmann::json j = audit_json("-m " + spm() + " --scenario load-free --cycles 2 --test-leak heap", 1);
  ASSERT_TRUE(j.contains("scenarios"));
  const auto* c = check(j["scenarios"][0], "anon residue");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE((*c)["ok"].get<bool>());
  EXPECT_FALSE(j["ok"].get<bool>());
}

TEST(Audit, FailsOnALeakedFd) {
  nlohmann::json j = audit_json("-m " + spm() + " --scenario load-free --cycles 2 --test-leak fd", 1);
  const auto* c = check(j["scenarios"][0], "fds residue");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["value"].get<int64_t>(), 2);
  EXPECT_FALSE((*c)["ok"].get<bool>());
}

TEST(Audit, FailsOnALeftLedgerEntry) {
  nlohmann::json j = audit_json("-m " + spm() + " --scenario load-free --cycles 2 --test-leak ledger", 1);
  const auto* c = check(j["scenarios"][0], "ledger entries");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE((*c)["ok"].get<bool>());
}

TEST(Audit, ThresholdsAreSettable) {
  // With the fd threshold raised above the leak, the same run passes that check.
  nlohmann::json j = audit_json("-m " + spm() + " --scenario load-free --cycles 2 --test-leak fd --max-fds 5", 0);
  EXPECT_TRUE((*check(j["scenarios"][0], "fds residue"))["ok"].get<bool>());
}

TEST(Audit, BadArgumentsAreClearErrors) {
  Result r = run("audit -m /nonexistent.gguf");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("/nonexistent.gguf"), std::string::npos) << r.out;
  r = run("audit -m " + spm() + " --scenario sometimes");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown scenario 'sometimes'"), std::string::npos) << r.out;
  r = run("audit -m " + spm() + " --load-mode paged");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown load mode 'paged'"), std::string::npos) << r.out;
  r = run("audit -m " + spm() + " --max-anon-residue lots");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("'lots' is not a size"), std::string::npos) << r.out;
  r = run("audit -m " + spm() + " --scenario serve-vision");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("needs --mmproj"), std::string::npos) << r.out;
}

TEST(Audit, ImagesOnTheServePathLeaveWhatRawLlamaWithMtmdKeepsNot) {
  // Requests with images, a third cancelled and a third losing their
  // clients, beside plain llama.cpp decoding them with mtmd's helpers.
  nlohmann::json j = audit_json("-m " + seeing().model + " --mmproj " + seeing().mmproj +
                                    " --scenario serve-vision --cycles 3 --compare-raw",
                                0);
  expect_clean(j);
  ASSERT_EQ(j["scenarios"].size(), 1u);
  const nlohmann::json& s = j["scenarios"][0];
  EXPECT_EQ(s["scenario"], "serve-vision");
  EXPECT_TRUE(s.contains("raw"));
}

TEST(Audit, PlotIsAnSvg) {
  std::string svg = reclaim::testing::temp_path("audit.svg");
  Result r = run("audit -m " + spm() + " --scenario load-free --cycles 2 --compare-raw --plot " + svg);
  EXPECT_EQ(r.status, 0) << r.out;
  std::ifstream f(svg);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("polyline"), std::string::npos);
}

TEST(Audit, CancelledRequestsInThePromptAndWhileGeneratingLeaveNothing) {
  nlohmann::json j = audit_json("-m " + bpe() + " --scenario cancel --cycles 2 --requests 8 --compare-raw", 0);
  expect_clean(j);
  ASSERT_EQ(j["scenarios"].size(), 1u);
  int in_prompt = 0, generating = 0;
  for (const auto& c : j["scenarios"][0]["reclaim"]["cycles"]) {
    in_prompt += c["cancelled_in_prompt"].get<int>();
    generating += c["cancelled_in_generation"].get<int>();
    EXPECT_EQ(c["requests"].size(), 8u);
  }
  EXPECT_GT(in_prompt, 0);
  EXPECT_GT(generating, 0);
  EXPECT_NE(check(j["scenarios"][0], "request anon growth"), nullptr);
}

TEST(Audit, GenerateChecksGrowthBetweenRequestsAndFailsOnARequestLeak) {
  nlohmann::json j = audit_json("-m " + spm() + " --scenario generate --cycles 2 --requests 6", 0);
  expect_clean(j);
  const nlohmann::json* growth = check(j["scenarios"][0], "request anon growth");
  ASSERT_NE(growth, nullptr);
  EXPECT_LE((*growth)["value"].get<int64_t>(), 64 << 10);
  // 256 KiB leaked in each request: the cycle residue catches it too, but the
  // between-request checks say where.
  j = audit_json("-m " + spm() + " --scenario generate --cycles 2 --requests 6 --test-leak request-heap", 1);
  growth = check(j["scenarios"][0], "request anon growth");
  ASSERT_NE(growth, nullptr);
  EXPECT_FALSE((*growth)["ok"].get<bool>());
  EXPECT_GE((*growth)["value"].get<int64_t>(), 5 * (256 << 10) - (64 << 10));
}

TEST(Audit, TheServePathEndsRequestsWhereAskedAndLeavesWhatRawLlamaKeepsNot) {
  nlohmann::json j = audit_json("-m " + bpe() + " --scenario serve-cancel,serve-vanish,serve-unload-cancel,serve-swap "
                                "--cycles 2 --requests 12 --parallel 2 --compare-raw", 0);
  expect_clean(j);
  ASSERT_EQ(j["scenarios"].size(), 4u);
  for (const auto& s : j["scenarios"]) {
    // The batch's context stays loaded between waves: residues from the first.
    EXPECT_TRUE(s["reclaim"]["requests_from_first"].get<bool>());
    int cancelled = 0, whole = 0, in_prompt = 0;
    for (const auto& c : s["reclaim"]["cycles"]) {
      in_prompt += c["cancelled_in_prompt"].get<int>();
      cancelled += c["cancelled_in_prompt"].get<int>() + c["cancelled_in_generation"].get<int>();
      whole += c["not_cancelled"].get<int>();
    }
    if (s["scenario"] == "serve-cancel") {
      // After the first wave, each is cancelled, by a deadline inside its
      // prompt or at a step; one whose deadline or step comes after its end
      // finishes whole.
      EXPECT_GE(cancelled, 12);
      EXPECT_GT(in_prompt, 0);
      EXPECT_GT(cancelled - in_prompt, 0);
    }
    if (s["scenario"] == "serve-vanish") {
      // After the first wave of each cycle, which runs whole, half of the
      // clients leave.
      EXPECT_EQ(cancelled, 8);
      EXPECT_EQ(whole, 16);
    }
    if (s["scenario"] == "serve-unload-cancel") EXPECT_GT(cancelled, 0) << "the unload cut what ran";
    // A plain program's heap keeps what a 151,936-token vocab freed.
    EXPECT_GT(s["raw_residues"].back()["anon"].get<int64_t>(), 4 << 20) << s["scenario"];
  }
}

TEST(Audit, TheServePathFailsOnALeak) {
  nlohmann::json j = audit_json("-m " + spm() + " --scenario serve --cycles 2 --test-leak request-heap", 1);
  ASSERT_TRUE(j.contains("scenarios"));
  const auto* c = check(j["scenarios"][0], "request anon growth");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE((*c)["ok"].get<bool>());
}

TEST(Audit, LogResourcesPrintsEveryAcquireAndRelease) {
  Result r = run("--log-resources audit -m " + spm() + " --scenario load-prompt-free --cycles 1");
  ASSERT_EQ(r.status, 0) << r.out;
  int acquires = 0, releases = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;  // the table is on the same stream
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["event"] == "acquire") ++acquires;
    if (j["event"] == "release") ++releases;
    EXPECT_TRUE(j.contains("owner"));
  }
  // model, threadpool, context, batch (greedy needs no sampler chain): each
  // acquired and released once.
  EXPECT_EQ(acquires, 4) << r.out;
  EXPECT_EQ(releases, acquires);
}

TEST(MakeTestModel, BadArgumentsAreClearErrors) {
  Result r = run("make-test-model --out " + reclaim::testing::temp_path("x.gguf") + " --vocab spm --embd 100 --layers 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("multiple of 64"), std::string::npos) << r.out;
  r = run("make-test-model --out " + reclaim::testing::temp_path("x.gguf") + " --vocab spm --size 12parsecs");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown unit"), std::string::npos) << r.out;
  r = run("make-test-model --out " + reclaim::testing::temp_path("x.gguf") + " --vocab spm --embd 64 --layers 2 --zero-layers-from 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--zero-layers-from must be 0..1"), std::string::npos) << r.out;
  r = run("make-test-model --out /nonexistent-dir/x.gguf --vocab spm --embd 64 --layers 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("/nonexistent-dir/x.gguf"), std::string::npos) << r.out;
}
