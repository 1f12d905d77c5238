// `reclaim run` as a user runs it: streaming, --json, Ctrl-C, a closed
// stdout, and one clear line for each kind of bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.h"
#include "temp_path.h"

using namespace reclaim::testing;

namespace {

nlohmann::json run_json(const std::string& args) {
  Result r = run("run " + args + " --json 2>/dev/null");
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

// Counts acquire and release lines of --log-resources on `err`.
std::pair<int, int> ledger_events(const std::string& err) {
  int acquires = 0, releases = 0;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line);
    acquires += j["event"] == "acquire";
    releases += j["event"] == "release";
  }
  return {acquires, releases};
}

// A copy of `from` whose architecture is `arch` (5 letters, as "llama").
std::string with_architecture(const std::string& from, const std::string& arch) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "general.architecture";
  size_t at = bytes.find(key);
  EXPECT_NE(at, std::string::npos);
  at += key.size() + 4 + 8;  // value type (u32), string length (u64)
  EXPECT_EQ(bytes.substr(at, 5), "llama");
  bytes.replace(at, 5, arch);
  std::string out = reclaim::testing::temp_path("arch_" + arch + ".gguf");
  std::ofstream(out, std::ios::binary) << bytes;
  return out;
}

}  // namespace

TEST(Run, StreamsTextToStdoutAndTimingsToStderr) {
  Child c({"run", "-m", spm(), "-p", "Hello", "-n", "24", "--temp", "0"});
  Result r = c.wait();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("generated 24 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("finish: length"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("tokens/s"), std::string::npos) << "timings leaked into stdout";
}

TEST(Run, JsonHasTextTokensFinishAndTimingsAndGreedyRepeats) {
  nlohmann::json a = run_json("-m " + bpe() + " -p 'The cat' -n 12 --temp 0");
  EXPECT_EQ(a["finish_reason"], "length");
  EXPECT_EQ(a["tokens"].size(), 12u);
  EXPECT_EQ(a["usage"]["completion_tokens"], 12);
  EXPECT_GT(a["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(a["timings"]["generate_per_second"].get<double>(), 0);
  EXPECT_GT(a["timings"]["first_token_ms"].get<double>(), 0);
  EXPECT_TRUE(a["text"].is_string());
  EXPECT_EQ(run_json("-m " + bpe() + " -p 'The cat' -n 12 --temp 0")["tokens"], a["tokens"]);
  // A sampled run reports its seed, and that seed repeats it.
  nlohmann::json s = run_json("-m " + bpe() + " -p 'The cat' -n 12 --temp 1");
  nlohmann::json again = run_json("-m " + bpe() + " -p 'The cat' -n 12 --temp 1 --seed " + std::to_string(s["seed"].get<uint32_t>()));
  EXPECT_EQ(again["tokens"], s["tokens"]);
}

TEST(Run, ChatUsesTheModelsTemplateAndStopStringsEndIt) {
  nlohmann::json j = run_json("-m " + bpe() + " --chat hello -n 8 --temp 0");
  EXPECT_EQ(j["tokens"].size(), 8u);
  // The same prompt, written out by hand, gives the same tokens: qwen2's
  // own Jinja template, with the system message it adds when none is given.
  const std::string file = reclaim::testing::temp_path("chat_prompt.txt");
  std::ofstream(file) << "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
                         "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
  nlohmann::json raw = run_json("-m " + bpe() + " -f " + file + " -n 8 --temp 0");
  EXPECT_EQ(raw["tokens"], j["tokens"]);
  const std::string text = j["text"];
  ASSERT_GE(text.size(), 4u);
  const std::string stop = text.substr(text.size() / 2, 2);
  nlohmann::json stopped = run_json("-m " + bpe() + " --chat hello -n 8 --temp 0 --stop '" + stop + "'");
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(stopped["text"], text.substr(0, text.find(stop)));
}

TEST(Run, CtrlCStopsReleasesEverythingAndExits130) {
  Child c({"--log-resources", "run", "-m", spm(), "-p", "Once", "-n", "-1", "--ctx", "2048", "--temp", "0"});
  ASSERT_TRUE(c.wait_for_output(20, 60)) << "no output to interrupt";
  c.signal(SIGINT);
  Result r = c.wait();
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted"), std::string::npos) << r.err;
  auto [acquires, releases] = ledger_events(r.err);
  EXPECT_GE(acquires, 4);  // model, threadpool, context, batch
  EXPECT_EQ(releases, acquires) << r.err;
}

TEST(Run, AClosedStdoutCancelsTheRequest) {
  const std::string cmd = "bash -c '" + std::string(RECLAIM_BIN) + " --log-resources run -m " + spm() +
                          " -p Once -n -1 --ctx 2048 2>" + reclaim::testing::temp_path("closed.err") + " | head -c 1 >/dev/null;"
                          " exit ${PIPESTATUS[0]}'";
  const int st = exit_code(std::system(cmd.c_str()));
  EXPECT_EQ(st, 141);
  std::ifstream f(reclaim::testing::temp_path("closed.err"));
  std::string err((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto [acquires, releases] = ledger_events(err);
  EXPECT_GE(acquires, 4);  // model, threadpool, context, batch
  EXPECT_EQ(releases, acquires) << err;
}

TEST(Run, BadInputIsOneClearLineAndExit2) {
  struct Case {
    std::string args, says;
  };
  const std::string text = reclaim::testing::temp_path("not_a_model.txt");
  std::ofstream(text) << "this is plain text, not a model";
  const std::vector<Case> cases = {
      {"-m /nonexistent.gguf -p x", "/nonexistent.gguf"},
      {"-m " + text + " -p x", "not a GGUF file"},
      {"-m " + with_architecture(spm(), "nolla") + " -p x", "unknown model architecture: 'nolla'"},
      {"-m " + spm() + " -p x -n 5000 --ctx 256", "more than the context of 256 tokens"},
      {"-m " + spm() + " -p x --ctx 64 -f /nonexistent.txt", "exactly one of"},
      {"-m " + spm(), "exactly one of"},
      {"-m " + spm() + " -f /nonexistent.txt", "prompt file '/nonexistent.txt'"},
      {"-m " + spm() + " --chat hi --chat-template no-such", "neither Jinja text nor one of llama.cpp's built-in ones"},
      {"-m " + spm() + " -p x --top-p 0", "top-p"},
      {"-m " + spm() + " -p x --load-mode fast", "unknown load mode 'fast'"},
  };
  for (const Case& c : cases) {
    Result r = run("run " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
}
