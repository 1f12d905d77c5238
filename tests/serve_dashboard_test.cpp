// The dashboard: its files from the binary under the key, the history its
// chart draws, the pin button's endpoint, and the page in a real browser.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "served.h"

using namespace reclaim::testing;

namespace {

using nlohmann::json;

const std::string kKey = "dashboard-key";

std::string basic(const std::string& user_and_password) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  const std::string& in = user_and_password;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<unsigned char>(in[i + 2]);
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += i + 1 < in.size() ? digits[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? digits[v & 63] : '=';
  }
  return "Basic " + out;
}

TEST(Dashboard, PageAndFilesComeFromTheBinaryUnderTheKey) {
  Served s({"--api-key", kKey});
  httplib::Client& c = s.http();
  const httplib::Headers html = {{"Accept", "text/html"}};

  auto r = c.Get("/", html);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Basic realm=\"reclaim\", charset=\"UTF-8\"");
  EXPECT_EQ(r->body.find("<html"), std::string::npos);
  for (const std::string& wrong : {basic("reclaim:" + kKey + "x"), basic("reclaim"), std::string("Basic %%%"),
                                   std::string("Basic "), "Bearer " + kKey + "x", basic(":" + kKey + ":")}) {
    r = c.Get("/", {{"Accept", "text/html"}, {"Authorization", wrong}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << wrong;
  }
  // A browser's login: any user name, the key as password; or the API's Bearer.
  for (const std::string& right : {basic("reclaim:" + kKey), basic(":" + kKey), basic("anyone:" + kKey), "Bearer " + kKey}) {
    r = c.Get("/", {{"Accept", "text/html"}, {"Authorization", right}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << right;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
    EXPECT_NE(r->body.find("/dashboard/dashboard.js"), std::string::npos);
    EXPECT_NE(r->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  }
  c.set_bearer_token_auth(kKey);
  // A program probing the root gets a line, not the page.
  r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "reclaim is running");
  r = c.Get("/dashboard/uPlot.iife.min.js");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.rfind("/*! https://github.com/leeoniya/uPlot", 0), 0u) << r->body.substr(0, 80);
  for (const char* f : {"/dashboard/dashboard.js", "/dashboard/dashboard.css", "/dashboard/uPlot.min.css", "/dashboard/uPlot.LICENSE"}) {
    r = c.Get(f);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << f;
    EXPECT_GT(r->body.size(), 100u) << f;
  }
  r = c.Get("/dashboard/secret.txt");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = c.Get("/dashboard/../../etc/passwd");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  s.expect_clean();
}

TEST(Dashboard, HistoryHasASampleASecondAndMarksLoadsAndUnloads) {
  Served s;
  json h;
  auto peak = [&] {
    int64_t p = 0;
    for (const json& b : h["ledger_host"]) p = std::max(p, b.get<int64_t>());
    return p;
  };
  s.post_json("/v1/models/load", {{"model", "bpe"}});
  // The loaded model shows on the ledger's line in a sample.
  ASSERT_TRUE(s.until([&] {
    h = s.get("/v1/resources/history");
    return peak() > 0;
  })) << h.dump();
  s.post_json("/v1/models/unload", {{"model", "bpe"}});
  auto marked = [&](const char* event) {
    for (const json& e : h["events"]) {
      if (e["event"] == event && e["model"] == "bpe") return true;
    }
    return false;
  };
  ASSERT_TRUE(s.until([&] {
    h = s.get("/v1/resources/history");
    return marked("load") && marked("unload") && h["ledger_host"].back() == 0;
  })) << h.dump();
  EXPECT_EQ(h["every_ms"], 1000);
  EXPECT_EQ(h["capacity"], 600);
  for (const char* k : {"rss", "anon", "device", "ledger_host", "ledger_device"}) EXPECT_EQ(h[k].size(), h["t"].size()) << k;
  for (size_t i = 1; i < h["t"].size(); ++i) EXPECT_GT(h["t"][i].get<double>(), h["t"][i - 1].get<double>());
  EXPECT_GT(peak(), 0);
  // ?since: only what came after.
  const double last = h["t"].back().get<double>();
  const json later = s.get("/v1/resources/history?since=" + h["t"].back().dump());
  for (const json& t : later["t"]) EXPECT_GT(t.get<double>(), last);
  for (const char* bad : {"abc", "", "1e999", "5x"}) {
    auto r = s.http().Get(("/v1/resources/history?since=" + std::string(bad)).c_str());
    expect_error(r, 400, "'since'");
  }
  s.expect_clean();
}

TEST(Dashboard, PinButtonPinsWithoutLoading) {
  Served s;
  json m = s.post_json("/v1/models/pin", {{"model", "spm"}});
  EXPECT_EQ(m["pinned"], true) << m.dump();
  EXPECT_EQ(m["state"], "unloaded") << m.dump();
  s.post_json("/v1/models/load", {{"model", "spm"}});
  m = s.model("spm");
  EXPECT_FALSE(m.contains("expires_at")) << m.dump();  // pinned: keep-alive does not run
  m = s.post_json("/v1/models/pin", {{"model", "spm"}, {"pin", false}});
  EXPECT_EQ(m["pinned"], false);
  EXPECT_TRUE(m.contains("expires_at")) << m.dump();  // unpinned: keep-alive from now
  expect_error(s.post("/v1/models/pin", {{"model", "nope"}}), 404, "nope");
  expect_error(s.post("/v1/models/pin", {{"model", "spm"}, {"pin", "yes"}}), 400, "'pin'");
  expect_error(s.post("/v1/models/pin", json::object()), 400, "'model'");
  s.expect_clean();
}

// The check: open the page in Chromium, see the model, load it and
// unload it with the page's buttons, and see the state and bytes follow; the
// page refused without the key. Screenshots go to the test's folder.
TEST(Dashboard, InChromiumFollowsALoadAndAnUnload) {
  const std::string playwright = RECLAIM_PLAYWRIGHT;
  ASSERT_FALSE(playwright.empty()) << "built without RECLAIM_PLAYWRIGHT: run scripts/setup, which fetches playwright-core";
  const std::string shots = RECLAIM_SCREENSHOT_DIR;
  std::filesystem::create_directories(shots);
  Served s({"--api-key", kKey});
  s.http().set_bearer_token_auth(kKey);
  const std::string cmd = "node " + std::string(RECLAIM_DASHBOARD_SCRIPT) + " " + playwright + " http://127.0.0.1:" +
                          std::to_string(s.port()) + " " + kKey + " bpe " + shots + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(exit_code(::pclose(p)), 0) << out;
  const json r = json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  // Refused without the key and with a wrong one: a 401, never the page.
  for (const char* k : {"no_key", "wrong_key"}) {
    EXPECT_EQ(r[k]["statuses"], json::array({401})) << out;
    EXPECT_NE(r[k]["models_table"], true) << out;
  }
  EXPECT_EQ(r["status"], 200) << out;
  EXPECT_EQ(r["before"]["state"], "unloaded") << out;
  EXPECT_EQ(r["before"]["host"], "0 B") << out;
  EXPECT_EQ(r["loaded"]["verdict"], "holding") << out;
  EXPECT_NE(r["loaded"]["host"], "0 B") << out;
  EXPECT_EQ(r["loaded"]["host"], r["loaded"]["ledger_owner"]) << out;
  // The details show every field the table has for a loaded model, whatever
  // they are: the page names none of them.
  const json fields = s.get("/v1/resources")["model_fields"];
  ASSERT_GT(fields.size(), 20u);
  for (const json& f : fields) {
    if (!f["always"].get<bool>()) continue;
    const std::string name = f["group"].is_null() ? f["key"].get<std::string>() : f["group"].get<std::string>() + "." + f["key"].get<std::string>();
    EXPECT_TRUE(r["details"].contains(name)) << name << " is not in the details: " << r["details"].dump();
  }
  EXPECT_EQ(r["details"]["id"], "bpe") << out;
  EXPECT_EQ(r["details"]["loads"], "1") << out;
  EXPECT_EQ(r["details"]["state"], "loaded") << out;
  EXPECT_EQ(r["details"]["bytes"], r["loaded"]["host"]) << out;
  EXPECT_EQ(r["pinned"], "never (pinned)") << out;
  EXPECT_EQ(r["unloaded"]["state"], "unloaded") << out;
  EXPECT_EQ(r["unloaded"]["host"], "0 B") << out;
  EXPECT_EQ(r["unloaded"]["device"], "0 B") << out;
  EXPECT_EQ(r["unloaded"]["ledger_owner"], false) << out;
  EXPECT_EQ(r["unloaded"]["verdict"], "clean") << out;
  EXPECT_GE(r["unloaded"]["chart_points"].get<int>(), 2) << out;
  EXPECT_EQ(r["errors"], json::array()) << out;
  EXPECT_TRUE(std::filesystem::file_size(shots + "/dashboard-loaded.png") > 10000);
  EXPECT_TRUE(std::filesystem::file_size(shots + "/dashboard-unloaded.png") > 10000);
  s.expect_clean();
}

}  // namespace
