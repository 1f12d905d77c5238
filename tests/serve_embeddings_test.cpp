// POST /v1/embeddings as OpenAI's clients send it: one input or many, text or
// token ids, floats or base64; and the request leaves nothing behind.
#include <httplib.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

std::vector<float> floats_of(const json& e) { return e.get<std::vector<float>>(); }

json with_fields(json body, const json& fields) {
  body.merge_patch(fields);
  return body;
}

std::vector<float> from_base64(const std::string& s) {
  static const std::string abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(abc.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

TEST(ServeEmbeddings, OneOrManyInputsTextOrIdsFloatsOrBase64) {
  Served s;
  const json one = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", "the river runs"}});
  ASSERT_EQ(one["object"], "list") << one.dump();
  ASSERT_EQ(one["data"].size(), 1u);
  const std::vector<float> river = floats_of(one["data"][0]["embedding"]);
  ASSERT_EQ(river.size(), 64u);  // the bpe test model is 64 wide
  double norm = 0;
  for (float x : river) norm += static_cast<double>(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_GT(one["usage"]["prompt_tokens"].get<int>(), 0);

  const json many = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", {"a cat", "the river runs"}}});
  ASSERT_EQ(many["data"].size(), 2u);
  EXPECT_EQ(many["data"][1]["index"], 1);
  EXPECT_EQ(floats_of(many["data"][1]["embedding"]), river);  // in order, and alone or not the same
  EXPECT_NE(floats_of(many["data"][0]["embedding"]), river);

  const json b64 =
      s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", "the river runs"}, {"encoding_format", "base64"}});
  EXPECT_EQ(from_base64(b64["data"][0]["embedding"].get<std::string>()), river);

  // Token ids, one list or several.
  const json ids = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", {1820, 14796, 8473}}});
  ASSERT_EQ(ids["data"].size(), 1u) << ids.dump();
  EXPECT_EQ(ids["usage"]["prompt_tokens"], 3);
  const json lists = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", {{1820, 14796, 8473}, {1820}}}});
  ASSERT_EQ(lists["data"].size(), 2u) << lists.dump();
  EXPECT_EQ(floats_of(lists["data"][0]["embedding"]), floats_of(ids["data"][0]["embedding"]));

  // llama-server's mixed shapes (tools/server/tests/unit/test_embedding.py):
  // token ids and strings in one prompt; prompts of either kind in a list.
  for (const auto& [input, n] : std::vector<std::pair<json, size_t>>{
           {json::array({12, 34, "string", 56, 78}), 1},
           {json::array({"string1", json::array({12, 34, 56})}), 2},
           {json::array({json::array({12, 34, 56}), json::array({12, "string", 34, 56})}), 2}}) {
    const json r = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", input}});
    EXPECT_EQ(r["data"].size(), n) << input.dump() << " " << r.dump();
  }
  const json mixed = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", {"a cat", {1820, 14796, 8473}}}});
  ASSERT_EQ(mixed["data"].size(), 2u) << mixed.dump();
  EXPECT_EQ(floats_of(mixed["data"][0]["embedding"]), floats_of(many["data"][0]["embedding"]));
  EXPECT_EQ(floats_of(mixed["data"][1]["embedding"]), floats_of(ids["data"][0]["embedding"]));

  for (const auto& [body, param] : std::vector<std::pair<json, std::string>>{
           {{{"model", "bpe"}, {"input", 5}}, "input"},
           {{{"model", "bpe"}, {"input", json::array()}}, "input"},
           {{{"model", "bpe"}, {"input", {"a", json::array()}}}, "input"},
           {{{"model", "bpe"}, {"input", {1, json::array({2})}}}, "input"},
           {{{"model", "bpe"}, {"input", {1, 2.5}}}, "input"},
           {{{"model", "bpe"}, {"input", "x"}, {"encoding_format", "int8"}}, "encoding_format"},
           {{{"model", "bpe"}, {"input", "x"}, {"dimensions", 8}}, "dimensions"}}) {
    auto r = s.post("/v1/embeddings", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
  }
  expect_error(s.post("/v1/embeddings", {{"model", "bpe"}, {"input", ""}}), 400, "empty");
  expect_error(s.post("/v1/embeddings", {{"model", "bpe"}, {"input", json::array({1, 99999999})}}), 400, "vocabulary");
  expect_error(s.post("/v1/embeddings", {{"model", "nope"}, {"input", "x"}}), 404, "nope");
  s.expect_clean();
}

// An input is held to a sequence of the model's batch (--ctx, what the
// memory budget counted), not the model's training context: the context
// made for it is as long as it, and its attention's buffer grows with its
// square.
TEST(ServeEmbeddings, AnInputLongerThanASequenceOfTheBatchIsA400) {
  Served s({"--ctx", "512"});
  json within = json::array(), over = json::array();
  for (int i = 0; i < 500; ++i) within.push_back(1820);
  for (int i = 0; i < 600; ++i) over.push_back(1820);
  const json ok = s.post_json("/v1/embeddings", {{"model", "bpe"}, {"input", within}});
  EXPECT_EQ(ok["usage"]["prompt_tokens"], 500) << ok.dump();
  auto r = s.post("/v1/embeddings", {{"model", "bpe"}, {"input", over}});
  expect_error(r, 400, "600 tokens, longer than the model's context of 512");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "context_length_exceeded") << r->body;
  s.expect_clean();
}

// POST /rerank as Jina's, Cohere's and TEI's clients send it, on a reranker
// as llama.cpp converts Qwen3-Reranker (make-test-model --reranker): each
// document's score is its own pair's, whatever else is ranked with it.
TEST(ServeRerank, RanksEachDocumentByItsOwnPairInJinasAndTeisShapes) {
  const std::string ranker = reclaim::testing::temp_path("ranker.gguf");
  const Result made = run("make-test-model --out " + ranker + " --vocab bpe --embd 64 --layers 2 --type f32 --reranker");
  ASSERT_EQ(made.status, 0) << made.out;
  Served s({"-m", ranker + ":ranker", "-m", bpe() + ":bpe", "--ctx", "2048"}, false);
  const std::vector<std::string> docs = {"A machine applies forces.", "Learning is acquiring knowledge.",
                                         "Machine learning learns from data.", "Paris est la capitale."};
  const json body = {{"model", "ranker"}, {"query", "Machine learning is"}, {"documents", docs}};
  const json all = s.post_json("/rerank", body);
  ASSERT_EQ(all["object"], "list") << all.dump();
  ASSERT_EQ(all["results"].size(), docs.size()) << all.dump();
  std::vector<double> score(docs.size(), -1);
  double before = 2;
  for (const json& e : all["results"]) {
    const double x = e["relevance_score"].get<double>();
    EXPECT_LE(x, before) << "best first: " << all.dump();
    before = x;
    // The softmax of "yes" against "no".
    EXPECT_GT(x, 0.0);
    EXPECT_LT(x, 1.0);
    score.at(e["index"].get<size_t>()) = x;
  }
  for (double x : score) EXPECT_GE(x, 0) << "each index once: " << all.dump();
  EXPECT_NE(*std::min_element(score.begin(), score.end()), *std::max_element(score.begin(), score.end()));

  // Each pair is the model's rerank template filled in, tokenized whole.
  auto count = [&](const std::string& text) {
    return static_cast<int>(s.post_json("/tokenize", {{"model", "ranker"}, {"content", text}})["tokens"].size());
  };
  int tokens = 0;
  for (const std::string& d : docs) {
    tokens += count("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
                    "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
                    "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: "
                    "Machine learning is\n<Document>: " + d + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  }
  EXPECT_EQ(all["usage"]["prompt_tokens"], tokens) << all.dump();
  EXPECT_EQ(all["usage"]["total_tokens"], tokens);

  // A document alone scores as it did among the others.
  const json alone = s.post_json("/v1/rerank", with_fields(body, {{"documents", json::array({docs[2]})}}));
  ASSERT_EQ(alone["results"].size(), 1u) << alone.dump();
  EXPECT_NEAR(alone["results"][0]["relevance_score"].get<double>(), score[2], 1e-5);
  // top_n keeps the best; more than there are is all of them.
  const json top = s.post_json("/reranking", with_fields(body, {{"top_n", 2}, {"return_documents", true}}));
  ASSERT_EQ(top["results"].size(), 2u) << top.dump();
  EXPECT_EQ(top["results"][0]["index"], all["results"][0]["index"]);
  EXPECT_EQ(top["results"][1]["index"], all["results"][1]["index"]);
  EXPECT_EQ(top["results"][0]["document"]["text"], docs.at(top["results"][0]["index"].get<size_t>()));
  EXPECT_EQ(s.post_json("/rerank", with_fields(body, {{"top_n", 99}}))["results"].size(), docs.size());
  // Cohere's documents as objects.
  const json objects = s.post_json("/v1/rerank", with_fields(body, {{"documents", json::array({json{{"text", docs[2]}}})}}));
  EXPECT_NEAR(objects["results"][0]["relevance_score"].get<double>(), score[2], 1e-5) << objects.dump();

  // TEI's: `texts` in, a bare array of {index, score} out.
  const json tei = s.post_json("/rerank", {{"model", "ranker"}, {"query", "Machine learning is"}, {"texts", docs},
                                           {"return_text", true}});
  ASSERT_TRUE(tei.is_array()) << tei.dump();
  ASSERT_EQ(tei.size(), docs.size());
  EXPECT_EQ(tei[0]["index"], all["results"][0]["index"]);
  EXPECT_NEAR(tei[0]["score"].get<double>(), all["results"][0]["relevance_score"].get<double>(), 1e-5);
  EXPECT_EQ(tei[0]["text"], docs.at(tei[0]["index"].get<size_t>()));

  // llama-server's refusals (test_rerank.py), and ours.
  for (const json& bad : {json::array(), json(), json(123), json::array({1, 2, 3})}) {
    auto r = s.post("/rerank", with_fields(body, {{"documents", bad}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad.dump() << " " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"].get<std::string>().rfind("documents", 0), 0u) << r->body;
  }
  expect_error(s.post("/rerank", {{"model", "ranker"}, {"documents", docs}}), 400, "'query' is required");
  expect_error(s.post("/rerank", with_fields(body, {{"query", 5}})), 400, "'query' must be a string");
  expect_error(s.post("/rerank", with_fields(body, {{"top_n", 0}})), 400, "top_n");
  expect_error(s.post("/rerank", with_fields(body, {{"documents", std::vector<std::string>(1001, "x")}})), 400, "at most 1000");
  // A query of 1,100 tokens paired with 1,000 documents is over a million
  // tokens to decode, from a body of 3 KB: refused before the first.
  std::string long_query;
  for (int i = 0; i < 1100; ++i) long_query += " a";
  auto costly = s.post("/rerank", with_fields(body, {{"query", long_query}, {"documents", std::vector<std::string>(1000, "x")}}));
  expect_error(costly, 400, "tokens in all");
  EXPECT_EQ(json::parse(costly->body)["error"]["param"], "documents") << costly->body;
  expect_error(s.post("/rerank", with_fields(body, {{"model", "bpe"}})), 400, "not a reranker");
  expect_error(s.post("/v1/embeddings", {{"model", "ranker"}, {"input", "x"}}), 400, "reranker");
  expect_error(s.post("/rerank", with_fields(body, {{"model", "nope"}})), 404, "nope");
  s.post("/v1/models/unload", {{"model", "ranker"}});
  s.expect_clean();
}

// A model's pooling over what its file says (llama-server's --pooling):
// mean and last pool the same outputs differently; none, a vector a token,
// is no embedding, and a name llama.cpp does not have is refused at start.
TEST(ServeEmbeddings, AModelsPoolingIsItsSettingOverItsFiles) {
  std::string config;
  for (const char* p : {"mean", "last", "none"}) {
    config += std::string("[models.") + p + "]\npath = \"" + bpe() + "\"\npooling = \"" + p + "\"\n";
  }
  const std::string path = temp_path("pooling.toml");
  std::ofstream(path) << config;
  Served s({"--config", path}, false);
  const json input = {{"input", "I believe the meaning of life is"}};
  const std::vector<float> mean = floats_of(s.post_json("/v1/embeddings", with_fields(input, {{"model", "mean"}}))["data"][0]["embedding"]);
  const std::vector<float> last = floats_of(s.post_json("/v1/embeddings", with_fields(input, {{"model", "last"}}))["data"][0]["embedding"]);
  ASSERT_EQ(mean.size(), last.size());
  double norm = 0, apart = 0;
  for (size_t i = 0; i < last.size(); ++i) {
    norm += static_cast<double>(last[i]) * last[i];
    apart += std::fabs(static_cast<double>(mean[i]) - last[i]);
  }
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_GT(apart, 1e-3);
  for (const char* p : {"/v1/embeddings", "/api/embed"}) {
    auto r = s.post(p, with_fields(input, {{"model", "none"}}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << p << " " << r->body;
    EXPECT_NE(r->body.find("pooling is none"), std::string::npos) << r->body;
  }
  for (const char* m : {"mean", "last", "none"}) s.post("/v1/models/unload", {{"model", m}});
  s.expect_clean();
  std::ofstream(path) << "[models.odd]\npath = \"" << bpe() << "\"\npooling = \"sum\"\n";
  const Result bad = run("serve --port 0 --config " + path);
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("models.odd.pooling: must be none, mean, cls, last or rank"), std::string::npos) << bad.out;
  const Result flag = run("serve --port 0 --pooling sum -m " + bpe());
  EXPECT_EQ(flag.status, 2) << flag.out;
  EXPECT_NE(flag.out.find("--pooling: must be none, mean, cls, last or rank"), std::string::npos) << flag.out;
}
