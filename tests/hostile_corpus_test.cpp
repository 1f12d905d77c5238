// Damaged model files (tests/gguf_corpus.h) through the real binary, as an
// operator who points reclaim at files from the internet would meet them:
// `reclaim run` says what is wrong in one line and exits 2, and a live
// `reclaim serve` answers each with an error while a good model beside them
// keeps answering, and nothing is left afterwards.
#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "cli_support.h"
#include "gguf_corpus.h"
#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

struct CorpusFile {
  std::string name, path;
  bool must_fail;
};

// Written once per test process: about 130 files, 450 MB, in its temp folder.
const std::vector<CorpusFile>& corpus() {
  static const std::vector<CorpusFile> files = [] {
    const std::string good = temp_path("corpus-good.gguf");
    Result made = run("make-test-model --out " + good + " --vocab spm --embd 64 --layers 2 --type q8_0 --seed 3");
    EXPECT_EQ(made.status, 0) << made.out;
    const std::string dir = temp_path("corpus");
    std::filesystem::create_directories(dir);
    std::vector<CorpusFile> out;
    for_each_damage(read_bytes(good), [&](const DamagedFile& d) {
      const std::string path = dir + "/" + d.name + ".gguf";
      std::ofstream(path, std::ios::binary) << d.bytes;
      out.push_back({d.name, path, d.must_fail});
    });
    return out;
  }();
  return files;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

TEST(HostileCorpus, HasEveryKindOfDamage) {
  std::set<std::string> kinds;
  for (const CorpusFile& f : corpus()) {
    if (f.name.rfind("trunc-", 0) == 0) kinds.insert("truncation");
    for (const char* v : {"=0", "=-1", "=huge", "=nan", "=inf"}) {
      if (f.name.size() > std::strlen(v) && f.name.compare(f.name.size() - std::strlen(v), std::string::npos, v) == 0) kinds.insert(v);
    }
    if (f.name.find("past-end") != std::string::npos) kinds.insert("past-end");
    if (f.name.rfind("attn-q-", 0) == 0 || f.name.rfind("embd-", 0) == 0) kinds.insert("tensor");
  }
  EXPECT_GE(corpus().size(), 60u);
  EXPECT_EQ(kinds.size(), 8u);
}

TEST(HostileCorpus, RunRefusesEachInOneLineWithExitTwo) {
  int refused = 0;
  for (const CorpusFile& f : corpus()) {
    const Result r = run("run -m " + quoted(f.path) + " -p Hello -n 2 --temp 0 --ctx 256");
    ASSERT_TRUE(r.status == 0 || r.status == 2) << f.name << ": exit " << r.status << "\n" << r.out;
    if (f.must_fail) EXPECT_EQ(r.status, 2) << f.name << " was accepted:\n" << r.out;
    if (r.status != 2) continue;
    ++refused;
    EXPECT_EQ(r.out.rfind("reclaim: error: ", 0), 0u) << f.name << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << f.name << " said more than one line:\n" << r.out;
  }
  EXPECT_GE(refused, 60);
}

TEST(HostileCorpus, ServeAnswersEachWhileAGoodModelBesideThemServesOn) {
  const std::string dir = temp_path("corpus");
  ASSERT_FALSE(corpus().empty());
  Child server({"serve", "--port", "0", "--ctx", "256", "--keep-alive", "0", "--models-dir", dir, "-m", spm() + ":good"});
  const std::string mark = "listening on http://127.0.0.1:";
  ASSERT_TRUE(server.wait_for_text(mark, 60)) << server.so_far().err;
  const std::string& out = server.so_far().out;
  httplib::Client http("127.0.0.1", std::stoi(out.substr(out.find(mark) + mark.size())));
  http.set_read_timeout(120, 0);
  auto complete = [&](const std::string& model) {
    const json body = {{"model", model}, {"prompt", "Hello"}, {"max_tokens", 2}, {"temperature", 0}};
    return http.Post("/v1/completions", body.dump(), "application/json");
  };
  auto good_answers = [&] {
    auto r = complete("good");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 2);
  };
  good_answers();
  int refused = 0;
  for (const CorpusFile& f : corpus()) {
    auto r = complete(f.name);
    ASSERT_TRUE(r) << f.name << ": the server did not answer\n" << server.so_far().err;
    ASSERT_TRUE(r->status == 200 || r->status == 422) << f.name << ": " << r->status << " " << r->body;
    if (f.must_fail) EXPECT_EQ(r->status, 422) << f.name << " was served";
    if (r->status != 422) continue;
    ++refused;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["code"], "invalid_model_file") << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(f.path), std::string::npos) << r->body;
  }
  EXPECT_GE(refused, 60);
  good_answers();

  // Each refused file is unloaded, on the ledger and in the residue.
  http.Post("/v1/models/unload", json{{"model", "good"}}.dump(), "application/json");
  auto res = http.Get("/v1/resources");
  ASSERT_TRUE(res);
  const json j = json::parse(res->body);
  EXPECT_EQ(held_beyond_standing(j["ledger"]), std::vector<std::string>{}) << j["ledger"].dump();
  EXPECT_LE(j["residue"]["anon"].get<int64_t>(), 1 << 20) << j["residue"].dump();
  EXPECT_EQ(j["residue"]["threads"], 0) << j["residue"].dump();
  EXPECT_EQ(j["residue"]["maps"], 0) << j["residue"].dump();
  http.stop();
  server.signal(SIGTERM);
  const Result end = server.wait();
  EXPECT_EQ(end.status, 0) << end.err;
}

}  // namespace
