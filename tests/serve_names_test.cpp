// Model names as users write them: Ollama's tags and hub ids as aliases,
// `-m PATH.gguf:ALIAS` with colons on either side of the split, and
// GET /v1/models/{id} as OpenAI's models.retrieve expects it.
#include <httplib.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

TEST(ServeNames, TagsAndHubIdsAreServedAndRetrieved) {
  // A folder with colons in its name, as some tools make them.
  const std::string dir = temp_path("models:v2");
  std::filesystem::create_directories(dir);
  const std::string tiny = dir + "/tiny.gguf";
  std::filesystem::copy_file(spm(), tiny, std::filesystem::copy_options::overwrite_existing);
  Served s({"-m", tiny + ":qwen2.5:7b", "-m", tiny + ":org/model:Q4_K_M", "-m", tiny});

  std::vector<std::string> ids;
  const json list = s.get("/v1/models");
  for (const json& m : list["data"]) ids.push_back(m["id"]);
  for (const char* want : {"qwen2.5:7b", "org/model:Q4_K_M", "tiny"}) {
    EXPECT_NE(std::find(ids.begin(), ids.end(), want), ids.end()) << want;
  }
  for (const char* id : {"qwen2.5:7b", "org/model:Q4_K_M"}) {
    const json reply = s.post_json("/v1/completions", {{"model", id}, {"prompt", "Once"}, {"max_tokens", 2}});
    EXPECT_EQ(reply["model"], id);
    const json m = s.get(std::string("/v1/models/") + id);
    EXPECT_EQ(m["id"], id);
    EXPECT_EQ(m["object"], "model");
    EXPECT_EQ(m["state"], "loaded");
  }
  expect_error(s.http().Get("/v1/models/no-such:model"), 404, "no-such:model");
  auto r = s.http().Get("/v1/models/no-such:model");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  // A name never reaches the filesystem, and nothing like a path is one.
  expect_error(s.post("/v1/completions", {{"model", "../tiny"}, {"prompt", "x"}}), 400, "not a name");
  for (const char* id : {"qwen2.5:7b", "org/model:Q4_K_M"}) s.post_json("/v1/models/unload", {{"model", id}});
  s.expect_clean();
}
