// POST /v1/embeddings as OpenAI's clients send it: one input or many, text or
// token ids, floats or base64; and the request leaves nothing behind.
#include <httplib.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

std::vector<float> floats_of(const json& e) { return e.get<std::vector<float>>(); }

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
