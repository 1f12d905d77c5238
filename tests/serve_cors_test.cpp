// Browser clients from other origins (server/cors.h), with the cases of
// llama-server's tools/server/tests/unit/test_security.py: preflights
// answered, localhost origins reflected by default, others refused, the
// API key still required.
#include <httplib.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

httplib::Result preflight(Served& s, const std::string& origin) {
  return s.http().Options("/v1/chat/completions", {{"Origin", origin},
                                                   {"Access-Control-Request-Method", "POST"},
                                                   {"Access-Control-Request-Headers", "Authorization, Content-Type"}});
}

}  // namespace

TEST(ServeCors, LocalhostOriginsAreReflectedAndOthersRefused) {
  Served s;
  for (const std::string origin : {"http://localhost", "http://localhost:8080", "http://127.0.0.1", "http://127.0.0.1:3000",
                                   "http://[::1]", "http://[::1]:3000"}) {
    auto r = preflight(s, origin);
    ASSERT_TRUE(r) << origin;
    EXPECT_EQ(r->status, 200) << origin;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), origin);
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "Authorization, Content-Type");
    EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
    auto models = s.http().Get("/v1/models", {{"Origin", origin}});
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
    EXPECT_EQ(models->get_header_value("Access-Control-Allow-Origin"), origin);
  }
  for (const std::string origin : {"http://web.mydomain.fr", "http://evil.com", "http://notlocalhost", "http://localhost.evil.com",
                                   "not an origin", "null"}) {
    auto r = preflight(s, origin);
    ASSERT_TRUE(r) << origin;
    EXPECT_EQ(r->status, 200) << origin;
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin")) << origin;
    // What a page there sends anyway is not run: its reply would be hidden
    // from it, but the server would have done the work.
    auto chat_from_there = s.http().Post("/v1/chat/completions", {{"Origin", origin}}, chat(2).dump(), "application/json");
    ASSERT_TRUE(chat_from_there);
    EXPECT_EQ(chat_from_there->status, 403) << chat_from_there->body;
    EXPECT_NE(chat_from_there->body.find("origin_not_allowed"), std::string::npos);
    EXPECT_FALSE(chat_from_there->has_header("Access-Control-Allow-Origin"));
  }
  EXPECT_EQ(s.model("bpe")["loads"], 0);  // none of them ran
  s.expect_clean();
}

TEST(ServeCors, NamedOriginsReplaceTheDefaultAndTheServersOwnPageIsAlwaysAllowed) {
  Served s({"--cors-origin", "https://app.example.com", "--cors-origin", "http://10.0.0.5:3000"});
  for (const std::string origin : {"https://app.example.com", "http://10.0.0.5:3000"}) {
    auto r = preflight(s, origin);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), origin);
  }
  EXPECT_FALSE(preflight(s, "http://localhost:3000")->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(preflight(s, "http://10.0.0.5:3001")->has_header("Access-Control-Allow-Origin"));
  // A page the server served itself: its origin is the request's Host.
  const std::string self = "http://127.0.0.1:" + std::to_string(s.port());
  auto own = s.http().Get("/v1/models", {{"Origin", self}});
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 200);
  s.expect_clean();
}

TEST(ServeCors, ThePreflightNeedsNoKeyAndTheRequestStillDoes) {
  Served s({"--api-key", "s3cret", "--cors-origin", "*"});
  auto r = preflight(s, "https://anywhere.example");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://anywhere.example");
  auto no_key = s.http().Get("/v1/models", {{"Origin", "https://anywhere.example"}});
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(json::parse(no_key->body)["error"]["type"], "authentication_error") << no_key->body;
  // The page can read why.
  EXPECT_EQ(no_key->get_header_value("Access-Control-Allow-Origin"), "https://anywhere.example");
  auto with_key = s.http().Get("/v1/models", {{"Origin", "https://anywhere.example"}, {"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(with_key);
  EXPECT_EQ(with_key->status, 200);
}

TEST(ServeCors, AValueThatIsNoOriginIsRefusedAtStart) {
  Result r = run("serve --port 0 -m " + bpe() + ":bpe --cors-origin example.com");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--cors-origin 'example.com' is not an origin"), std::string::npos) << r.out;
}
