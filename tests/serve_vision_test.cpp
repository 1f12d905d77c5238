// Images through `reclaim serve`: a model served with its projector (-m
// with --mmproj, or beside it in --models-dir) answers chats with images in
// OpenAI's and Ollama's shapes, from the official clients too; says so in
// /v1/models, /api/show and /props; refuses each hostile image with a 400
// within a bound while it goes on serving; and gives everything back.
#include <httplib.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "png.h"
#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string data_url(const std::string& file) { return "data:image/png;base64," + base64(file); }

json image_part(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }

json image_chat(const std::string& model, json parts, int max_tokens = 8) {
  parts.insert(parts.begin(), json{{"type", "text"}, {"text", "What is in this picture?"}});
  return {{"model", model},
          {"messages", json::array({{{"role", "user"}, {"content", parts}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

std::vector<std::string> served_seeing() {
  return {"-m", seeing().model + ":eye", "--mmproj", seeing().mmproj};
}

// "eye" with its projector ('mmproj' in --config), "plain" without one.
std::vector<std::string> seeing_and_plain() {
  const std::string path = temp_path("vision-models.toml");
  std::ofstream(path) << "[models.eye]\npath = \"" << seeing().model << "\"\nmmproj = \"" << seeing().mmproj
                      << "\"\n[models.plain]\npath = \"" << spm() << "\"\n";
  return {"--config", path};
}

std::string content(const json& reply) { return reply["choices"][0]["message"]["content"].get<std::string>(); }

}  // namespace

TEST(ServeVision, AChatWithAnImageIsAnsweredByWhatIsInTheImage) {
  Served s(served_seeing(), false);
  const json text_only = s.post_json("/v1/chat/completions", image_chat("eye", json::array()));
  const json a = s.post_json("/v1/chat/completions", image_chat("eye", {image_part(data_url(png(40, 30, 3)))}));
  const json b = s.post_json("/v1/chat/completions", image_chat("eye", {image_part(data_url(png(64, 64, 90)))}));
  ASSERT_TRUE(a.contains("usage")) << a.dump();
  EXPECT_GE(a["usage"]["prompt_tokens"].get<int>(), text_only["usage"]["prompt_tokens"].get<int>() + 15)
      << "the image's 16 embeddings are prompt tokens";
  EXPECT_NE(content(a), content(b)) << "another image, another answer";
  // The same image again: the prompt cache has the conversation with it.
  const json again = s.post_json("/v1/chat/completions", image_chat("eye", {image_part(data_url(png(40, 30, 3)))}));
  EXPECT_EQ(content(again), content(a));
  EXPECT_GE(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            text_only["usage"]["prompt_tokens"].get<int>()) << again.dump();
  s.post("/v1/models/unload", {{"model", "eye"}});
  s.expect_clean();
}

TEST(ServeVision, EachHostileImageIsA400WithinABoundAndTheServerGoesOn) {
  Served s(seeing_and_plain(), false);
  const std::string good = png(16, 16, 1);
  std::vector<json> many, sixteen;
  for (int i = 0; i < 17; ++i) many.push_back(image_part(data_url(good)));
  for (int i = 0; i < 16; ++i) sixteen.push_back(image_part(data_url(good)));
  const struct {
    json body;
    std::string says;
  } cases[] = {
      {image_chat("eye", {image_part("https://example.com/cat.png")}), "fetches nothing"},
      {image_chat("eye", {image_part("data:image/png;base64,@@@@")}), "not base64"},
      {image_chat("eye", {image_part("data:image/png,rawbytes")}), "base64 data: URL"},
      {image_chat("eye", {image_part(data_url("this is not an image at all"))}), "not an image"},
      {image_chat("eye", {image_part(data_url(good.substr(0, good.size() / 2)))}), "cannot be decoded"},
      {image_chat("eye", {image_part(data_url(png(65535, 65535, 0, 1, 1)))}), "more pixels"},
      {image_chat("eye", many), "more than the 16"},
      // 16 images of 16 embeddings each: more than the context of 256.
      {image_chat("eye", sixteen), "longer than the context"},
      {image_chat("plain", {image_part(data_url(good))}), "no projector"},
      {{{"model", "eye"}, {"messages", {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}}}, "input_audio"},
  };
  for (const auto& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    expect_error(s.post("/v1/chat/completions", c.body), 400, c.says);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << c.says;
    // Streamed, the same refusal, before any header of the stream: the
    // images are decoded before it starts.
    json streamed = c.body;
    streamed["stream"] = true;
    expect_error(s.post("/v1/chat/completions", streamed), 400, c.says);
  }
  const json ok = s.post_json("/v1/chat/completions", image_chat("eye", {image_part(data_url(good))}));
  EXPECT_FALSE(content(ok).empty());
  s.post("/v1/models/unload", {{"model", "eye"}});
  s.post("/v1/models/unload", {{"model", "plain"}});
  s.expect_clean();
}

TEST(ServeVision, OllamasImagesAndWhatEachApiSaysOfTheModel) {
  Served s(seeing_and_plain(), false);
  const std::string b64 = base64(png(24, 24, 5));
  const json chat = s.post_json("/api/chat", {{"model", "eye"},
                                              {"stream", false},
                                              {"options", {{"temperature", 0}, {"num_predict", 6}}},
                                              {"messages", {{{"role", "user"}, {"content", "What is it?"}, {"images", {b64}}}}}});
  EXPECT_GE(chat["prompt_eval_count"].get<int>(), 16) << chat.dump();
  const json gen = s.post_json("/api/generate", {{"model", "eye"},
                                                 {"stream", false},
                                                 {"prompt", "What is it?"},
                                                 {"images", {b64}},
                                                 {"options", {{"temperature", 0}, {"num_predict", 6}}}});
  EXPECT_EQ(gen["response"], chat["message"]["content"]) << "the same prompt, images first, as Ollama places them";
  expect_ollama_error(s.post("/api/generate", {{"model", "eye"}, {"prompt", "x"}, {"raw", true}, {"images", {b64}}}), 400, "raw");
  expect_ollama_error(s.post("/api/chat", {{"model", "eye"}, {"messages", {{{"role", "user"}, {"content", "x"}, {"images", {"%%%"}}}}}}),
               400, "messages[0].images[0]");

  const auto caps = [&](const std::string& m) { return s.post_json("/api/show", {{"model", m}})["capabilities"]; };
  const json eye = caps("eye"), plain = caps("plain");
  EXPECT_NE(std::find(eye.begin(), eye.end(), "vision"), eye.end()) << eye;
  EXPECT_EQ(std::find(plain.begin(), plain.end(), "vision"), plain.end()) << plain;
  EXPECT_EQ(s.model("eye")["capabilities"], json({"completion", "multimodal"}));
  EXPECT_EQ(s.model("plain")["capabilities"], json({"completion"}));
  EXPECT_EQ(s.model("eye")["mmproj"], seeing().mmproj);
  EXPECT_EQ(s.get("/props?model=eye")["modalities"]["vision"], true);
  EXPECT_EQ(s.get("/props?model=plain")["modalities"]["vision"], false);
  s.post("/v1/models/unload", {{"model", "eye"}});
  s.expect_clean();
}

TEST(ServeVision, AnthropicsAndTheResponsesApisShapesTakeImagesToo) {
  Served s(served_seeing(), false);
  const std::string file = png(30, 20, 4);
  const json chat = s.post_json("/v1/chat/completions", image_chat("eye", {image_part(data_url(file))}, 6));
  const json messages = s.post_json(
      "/v1/messages",
      {{"model", "eye"},
       {"max_tokens", 6},
       {"temperature", 0},
       {"messages",
        {{{"role", "user"},
          {"content",
           {{{"type", "text"}, {"text", "What is in this picture?"}},
            {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", base64(file)}}}}}}}}}});
  // Anthropic counts the tokens read from the cache apart.
  EXPECT_EQ(messages["usage"]["input_tokens"].get<int>() + messages["usage"]["cache_read_input_tokens"].get<int>(),
            chat["usage"]["prompt_tokens"].get<int>())
      << messages.dump();
  EXPECT_EQ(messages["content"][0]["text"], content(chat)) << "the same prompt, the same answer";
  const json responses = s.post_json(
      "/v1/responses",
      {{"model", "eye"},
       {"max_output_tokens", 6},
       {"temperature", 0},
       {"input",
        {{{"role", "user"},
          {"content",
           {{{"type", "input_text"}, {"text", "What is in this picture?"}},
            {{"type", "input_image"}, {"image_url", data_url(file)}}}}}}}});
  EXPECT_EQ(responses["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]) << responses.dump();
  s.post("/v1/models/unload", {{"model", "eye"}});
  s.expect_clean();
}

TEST(ServeVision, AProjectorThatCannotServeIsA422AndTheServerGoesOn) {
  // A model file where the projector should be: vetted with its model, the
  // pair is refused by name; the model beside it answers.
  const std::string path = temp_path("vision-bad-mmproj.toml");
  std::ofstream(path) << "[models.eye]\npath = \"" << seeing().model << "\"\nmmproj = \"" << spm()
                      << "\"\n[models.plain]\npath = \"" << spm() << "\"\n";
  Served s({"--config", path}, false);
  const auto r = s.post("/v1/chat/completions", image_chat("eye", {image_part(data_url(png(8, 8)))}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422) << r->body;
  EXPECT_NE(r->body.find("cli_spm.gguf"), std::string::npos) << r->body;
  EXPECT_FALSE(content(s.post_json("/v1/chat/completions", image_chat("plain", json::array()))).empty());
  s.post("/v1/models/unload", {{"model", "plain"}});
  s.expect_clean();
  const Result flag = run("serve --port 0 --mmproj " + seeing().mmproj);
  EXPECT_EQ(flag.status, 2) << flag.out;
  EXPECT_NE(flag.out.find("--mmproj is the image projector of the -m models"), std::string::npos) << flag.out;
}

TEST(ServeVision, AModelsFolderGivesEachModelTheProjectorBesideIt) {
  namespace fs = std::filesystem;
  const fs::path dir = temp_path("vision-models-dir");
  fs::remove_all(dir);
  fs::create_directories(dir / "eye-folder");
  fs::copy_file(seeing().model, dir / "eye-folder" / "model-f16.gguf");
  fs::copy_file(seeing().mmproj, dir / "eye-folder" / "mmproj-model-f16.gguf");
  fs::copy_file(seeing().model, dir / "beside.gguf");
  fs::copy_file(seeing().mmproj, dir / "mmproj-beside.gguf");
  fs::copy_file(spm(), dir / "plain.gguf");
  fs::create_directories(dir / "late-folder");
  fs::copy_file(seeing().model, dir / "late-folder" / "model-f16.gguf");
  Served s({"--models-dir", dir.string()}, false);
  std::vector<std::string> names;
  const json listed = s.get("/v1/models");
  for (const json& m : listed["data"]) names.push_back(m["id"]);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"beside", "eye-folder", "late-folder", "plain"}))
      << "a projector is no model\n" << listed.dump() << s.log();
  // A projector put into a model's folder while the server runs is that
  // model's from then on, with no request or SIGHUP.
  EXPECT_TRUE(s.model("late-folder")["mmproj"].is_null());
  fs::copy_file(seeing().mmproj, dir / "late-folder" / "mmproj-model-f16.gguf");
  ASSERT_TRUE(s.until([&] { return !s.model("late-folder")["mmproj"].is_null(); })) << s.log();
  EXPECT_EQ(s.model("eye-folder")["mmproj"], (dir / "eye-folder" / "mmproj-model-f16.gguf").string());
  EXPECT_EQ(s.model("beside")["mmproj"], (dir / "mmproj-beside.gguf").string());
  EXPECT_TRUE(s.model("plain")["mmproj"].is_null());
  const json a = s.post_json("/v1/chat/completions", image_chat("eye-folder", {image_part(data_url(png(20, 20, 2)))}));
  const json b = s.post_json("/v1/chat/completions", image_chat("beside", {image_part(data_url(png(20, 20, 2)))}));
  EXPECT_EQ(content(a), content(b)) << "the same model and projector, found both ways";
  s.post("/v1/models/unload", {{"model", "eye-folder"}});
  s.post("/v1/models/unload", {{"model", "beside"}});
  s.expect_clean();
  fs::remove_all(dir);
}

TEST(ServeVision, TheOfficialClientsSendImages) {
  const std::string sdk = RECLAIM_OPENAI_SDK, client = RECLAIM_OLLAMA_CLIENT;
  ASSERT_FALSE(sdk.empty() || client.empty()) << "built without the OpenAI SDK or ollama-js: run scripts/setup";
  const std::string one = temp_path("vision-one.png"), other = temp_path("vision-other.png");
  std::ofstream(one, std::ios::binary) << png(40, 30, 3);
  std::ofstream(other, std::ios::binary) << png(64, 64, 90);
  Served s(served_seeing(), false);
  int status = 0;
  const std::string out = run_node_script(RECLAIM_VISION_SCRIPT, sdk + " " + client + " http://127.0.0.1:" +
                                                                     std::to_string(s.port()) + " eye " + one + " " + other,
                                          status);
  ASSERT_EQ(status, 0) << out;
  const json r = json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  EXPECT_FALSE(r["openai"]["content"].get<std::string>().empty()) << out;
  EXPECT_GE(r["openai"]["prompt_tokens"].get<int>(), 16) << out;
  EXPECT_EQ(r["openai_stream"], r["openai"]["content"]) << out;
  EXPECT_NE(r["openai_other"], r["openai"]["content"]) << out;
  EXPECT_EQ(r["web"]["status"], 400) << out;
  EXPECT_GE(r["ollama_chat"]["prompt_eval_count"].get<int>(), 16) << out;
  EXPECT_EQ(r["ollama_generate"], r["ollama_chat"]["content"]) << out;
  EXPECT_NE(std::find(r["capabilities"].begin(), r["capabilities"].end(), "vision"), r["capabilities"].end()) << out;
  s.post("/v1/models/unload", {{"model", "eye"}});
  s.expect_clean();
}
