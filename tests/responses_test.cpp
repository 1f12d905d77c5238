// OpenAI's Responses API in reclaim's server library: input items read into
// the chat request every API runs, and a reply written as a response and its
// typed events, here with replies made by hand (random weights call no
// tools); tests/serve_responses_test.cpp runs it over HTTP.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/responses.h"

using namespace reclaim;
using namespace reclaim::server;
using nlohmann::json;

namespace {

std::vector<json> events(const std::string& text) {
  std::vector<json> out;
  for (size_t at = text.find("event: "); at != std::string::npos; at = text.find("event: ", at + 1)) {
    const size_t nl = text.find('\n', at);
    const size_t data = text.find("data: ", nl);
    json d = json::parse(text.substr(data + 6, text.find("\n\n", data) - data - 6));
    EXPECT_EQ(d["type"], text.substr(at + 7, nl - at - 7));
    out.push_back(std::move(d));
  }
  return out;
}

void expect_refused(const json& body, const std::string& param, const std::string& says) {
  try {
    (void)responses_chat_body(body);
    ADD_FAILURE() << "accepted: " << body.dump();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400) << body.dump();
    EXPECT_EQ(e.error().param, param) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Responses, InputItemsAreReadIntoTheChatTemplatesMessages) {
  const json body = {
      {"model", "m"},
      {"instructions", "Be brief."},
      {"input",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", {{{"type", "summary_text"}, {"text", "Look it up."}}}}},
        {{"type", "message"}, {"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "Looking."}}}}},
        {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}},
        {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "18 C"}},
        {{"role", "developer"}, {"content", {{{"type", "input_text"}, {"text", "Answer in French."}}}}}}},
      {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"description", "Weather"}, {"parameters", {{"type", "object"}}}, {"strict", true}}}},
      {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
      {"text", {{"format", {{"type", "json_schema"}, {"name", "w"}, {"schema", {{"type", "object"}}}, {"strict", true}}}}},
      {"max_output_tokens", 32},
      {"store", true},
      {"stream", true}};
  const json o = responses_chat_body(body);
  const json want = {
      {{"role", "system"}, {"content", "Be brief."}},
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", "Looking."},
       {"tool_calls", {{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}}},
       {"reasoning_content", "Look it up."}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}},
      {{"role", "developer"}, {"content", "Answer in French."}}};
  EXPECT_EQ(o["messages"], want) << o["messages"].dump(1);
  EXPECT_EQ(o["tools"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(o["tool_choice"], json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(o["response_format"]["json_schema"]["name"], "w");
  EXPECT_EQ(o["max_tokens"], 32);
  EXPECT_EQ(o["stream"], true);
  EXPECT_FALSE(o.contains("store"));
  EXPECT_EQ(responses_chat_body({{"input", "Hi"}})["messages"], json::array({{{"role", "user"}, {"content", "Hi"}}}));
}

TEST(Responses, EachMistakeIsA400NamingItsField) {
  expect_refused({{"input", "Hi"}, {"previous_response_id", "resp_1"}}, "previous_response_id", "keeps no responses");
  expect_refused(json::object(), "input", "required");
  expect_refused({{"input", json::array()}}, "input", "non-empty");
  expect_refused({{"input", {{{"role", "robot"}, {"content", "x"}}}}}, "input[0].role", "user, system");
  expect_refused({{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "x"}}}}}}}},
                 "input[0].content[0].image_url", "data: URL");
  expect_refused({{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"file_id", "file-1"}}}}}}}},
                 "input[0].content[0].file_id", "keeps no files");
  expect_refused({{"input", {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}}}, "input[0].content[0]", "text only");
  expect_refused({{"input", {{{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}}}}, "input[0].call_id", "string");
  expect_refused({{"input", {{{"type", "web_search_call"}}}}}, "input[0].type", "must be message");
  expect_refused({{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}, "tools[0].type", "no tools of its own");
  expect_refused({{"input", "x"}, {"tool_choice", 5}}, "tool_choice", "must be");
  expect_refused({{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, "text.format.type", "json_schema");
}

TEST(Responses, AStreamIsCreatedThenEachItemThenCompleted) {
  CompletionRequest req;
  req.model = "m";
  auto answer = responses_answer(req);
  std::string text;
  auto delta = [&](const std::string& reasoning, const std::string& content, size_t tool = std::string::npos, const std::string& name = "",
                   const std::string& args = "") {
    ChatDelta d;
    d.reasoning = reasoning;
    d.content = content;
    d.tool_index = tool;
    d.tool = {"", name, args};
    text += answer->delta(d, nullptr);
  };
  delta("Hmm.", "");
  delta("", "Call");
  delta("", "ing.");
  delta("", "", 0, "get_weather", "{\"city\":");
  delta("", "", 0, "", "\"Paris\"}");
  GenerateResult r;
  r.finish = FinishReason::eos;
  r.timings.prompt_tokens = 7;
  r.timings.generated_tokens = 9;
  ChatReply reply{"Calling.", "Hmm.", {{"", "get_weather", "{\"city\":\"Paris\"}"}}};
  text += answer->end(r, &reply, nullptr);
  const std::vector<json> ev = events(text);
  std::vector<std::string> types;
  for (size_t i = 0; i < ev.size(); ++i) {
    types.push_back(ev[i]["type"]);
    EXPECT_EQ(ev[i]["sequence_number"], static_cast<int>(i));
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  ASSERT_EQ(types, want) << text;
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_EQ(ev[12]["text"], "Calling.");
  EXPECT_EQ(ev[18]["arguments"], "{\"city\":\"Paris\"}");
  const json done = ev.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["usage"]["total_tokens"], 16);
  ASSERT_EQ(done["output"].size(), 3u) << done.dump();
  EXPECT_EQ(done["output"][0]["type"], "reasoning");
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Calling.");
  EXPECT_EQ(done["output"][2]["type"], "function_call");
  // Not streamed: the same items, the call under the same ids.
  auto whole_answer = responses_answer(req);
  const json whole = json::parse(whole_answer->whole(r, &reply, nullptr));
  EXPECT_EQ(whole["output"][2]["name"], "get_weather");
  EXPECT_EQ(whole["output"][2]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(whole["store"], false);
  r.finish = FinishReason::length;
  const json cut = json::parse(responses_answer(req)->whole(r, nullptr, nullptr));
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  const std::vector<json> failed = events(responses_answer(req)->stream_error(ApiError{503, "server_error", "cancelled", "unloaded", 5, ""}));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]["response"]["status"], "failed");
  EXPECT_EQ(failed[0]["response"]["error"]["message"], "unloaded");
}
