// Anthropic's Messages API in reclaim's server library: a body read into the
// chat request every API runs, and a reply written as Anthropic's message
// and event stream, here with replies made by hand (random weights do not
// call tools); tests/serve_anthropic_test.cpp runs it over HTTP.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/anthropic.h"

using namespace reclaim;
using namespace reclaim::server;
using nlohmann::json;

namespace {

// The events of a stream's text, in order: [name, data].
std::vector<std::pair<std::string, json>> events(const std::string& text) {
  std::vector<std::pair<std::string, json>> out;
  for (size_t at = text.find("event: "); at != std::string::npos; at = text.find("event: ", at + 1)) {
    const size_t nl = text.find('\n', at);
    const size_t data = text.find("data: ", nl);
    out.emplace_back(text.substr(at + 7, nl - at - 7), json::parse(text.substr(data + 6, text.find("\n\n", data) - data - 6)));
  }
  return out;
}

void expect_refused(const json& body, const std::string& param, const std::string& says) {
  try {
    (void)anthropic_chat_body(body, false);
    ADD_FAILURE() << "accepted: " << body.dump();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400) << body.dump();
    EXPECT_EQ(e.error().param, param) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Anthropic, AnAgentsTranscriptIsReadIntoTheChatTemplatesMessages) {
  const json body = {
      {"model", "m"},
      {"max_tokens", 64},
      {"system", json::array({{{"type", "text"}, {"text", "Be brief."}}, {{"type", "text"}, {"text", "Use tools."}}})},
      {"messages",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "thinking"}, {"thinking", "I should look."}, {"signature", "x"}},
           {{"type", "text"}, {"text", "Looking."}},
           {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content",
          {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", {{{"type", "text"}, {"text", "18 C"}}}}},
           {{"type", "text"}, {"text", "And Rome?"}}}}}}},
      {"tools", {{{"name", "get_weather"}, {"description", "Weather"}, {"input_schema", {{"type", "object"}}}}}},
      {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}, {"disable_parallel_tool_use", true}}},
      {"stop_sequences", {"END"}},
      {"temperature", 0.5},
      {"stream", true},
      {"metadata", {{"user_id", "u"}}}};
  const json o = anthropic_chat_body(body, false);
  const json want_messages = {
      {{"role", "system"}, {"content", "Be brief.\nUse tools."}},
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", "Looking."},
       {"tool_calls", {{{"id", "toolu_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}}}}}},
       {"reasoning_content", "I should look."}},
      {{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "18 C"}},
      {{"role", "user"}, {"content", "And Rome?"}}};
  EXPECT_EQ(o["messages"], want_messages) << o["messages"].dump(1);
  EXPECT_EQ(o["tools"], json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object"}}}])"));
  EXPECT_EQ(o["tool_choice"], json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(o["parallel_tool_calls"], false);
  EXPECT_EQ(o["stop"], json::array({"END"}));
  EXPECT_EQ(o["max_tokens"], 64);
  EXPECT_EQ(o["temperature"], 0.5);
  EXPECT_EQ(o["stream"], true);
  EXPECT_FALSE(o.contains("metadata"));
  // any and none; count_tokens needs no max_tokens.
  json any = body;
  any["tool_choice"] = {{"type", "any"}};
  EXPECT_EQ(anthropic_chat_body(any, false)["tool_choice"], "required");
  any.erase("max_tokens");
  EXPECT_FALSE(anthropic_chat_body(any, true).contains("max_tokens"));
}

TEST(Anthropic, EachMistakeIsA400NamingItsField) {
  const json ok = {{"model", "m"}, {"max_tokens", 8}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  auto with = [&](const json& patch) {
    json b = ok;
    b.merge_patch(patch);
    return b;
  };
  json no_max = ok;
  no_max.erase("max_tokens");
  expect_refused(no_max, "max_tokens", "required");
  expect_refused(with({{"messages", json::array()}}), "messages", "non-empty");
  expect_refused(with({{"messages", {{{"role", "system"}, {"content", "x"}}}}}), "messages[0].role", "\"user\" or \"assistant\"");
  expect_refused(with({{"messages", {{{"role", "user"}, {"content", {{{"type", "image"}, {"source", {}}}}}}}}}),
                 "messages[0].content[0].source.type", "\"base64\" or \"url\"");
  const json web_image = {{"type", "image"}, {"source", {{"type", "url"}, {"url", "https://x/y.png"}}}};
  const json web_message = {{"role", "user"}, {"content", json::array({web_image})}};
  expect_refused(with({{"messages", json::array({web_message})}}), "messages[0].content[0].source.url", "fetches nothing");
  expect_refused(with({{"messages", {{{"role", "user"}, {"content", {{{"type", "document"}, {"source", {}}}}}}}}}), "messages[0].content[0]",
                 "text only");
  expect_refused(with({{"messages", {{{"role", "user"}, {"content", {{{"type", "tool_use"}, {"id", "a"}, {"name", "f"}}}}}}}}),
                 "messages[0].content[0]", "cannot hold");
  expect_refused(with({{"messages", {{{"role", "assistant"}, {"content", {{{"type", "tool_use"}, {"id", "a"}, {"name", "f"}, {"input", 3}}}}}}}}),
                 "messages[0].content[0].input", "object");
  expect_refused(with({{"messages", {{{"role", "user"}, {"content", {{{"type", "tool_result"}}}}}}}}), "messages[0].content[0].tool_use_id",
                 "string");
  expect_refused(with({{"system", 5}}), "system", "string or an array");
  expect_refused(with({{"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}}), "tools[0].type", "no tools of its own");
  expect_refused(with({{"tool_choice", {{"type", "sometimes"}}}}), "tool_choice.type", "auto, any, tool or none");
  expect_refused(with({{"stop_sequences", {"a", "b", "c", "d", "e"}}}), "stop_sequences", "at most 4");
}

TEST(Anthropic, AStreamIsMessageStartThenEachBlockThenTheStopReason) {
  CompletionRequest req;
  req.model = "m";
  req.generate.prompt_tokens = {1, 2, 3, 4, 5};
  auto answer = anthropic_answer(req);
  EXPECT_EQ(answer->waiting(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
  std::string text;
  auto delta = [&](const std::string& reasoning, const std::string& content, size_t tool = std::string::npos, const std::string& id = "",
                   const std::string& name = "", const std::string& args = "") {
    ChatDelta d;
    d.reasoning = reasoning;
    d.content = content;
    d.tool_index = tool;
    d.tool = {id, name, args};
    text += answer->delta(d, nullptr);
  };
  delta("Let me", "");
  delta(" think.", "");
  delta("", "Calling.");
  delta("", "", 0, "", "get_weather", "{\"city\":");
  delta("", "", 0, "", "", "\"Paris\"}");
  delta("", "", 1, "call_b", "get_time", "{}");
  GenerateResult r;
  r.finish = FinishReason::eos;
  r.timings.generated_tokens = 9;
  ChatReply reply{"Calling.", "Let me think.", {{"", "get_weather", "{\"city\":\"Paris\"}"}, {"call_b", "get_time", "{}"}}};
  text += answer->end(r, &reply, nullptr);

  const auto ev = events(text);
  std::vector<std::string> names;
  for (const auto& [name, data] : ev) {
    names.push_back(name);
    EXPECT_EQ(data["type"], name) << data.dump();
  }
  const std::vector<std::string> want = {"message_start",       "content_block_start", "content_block_delta", "content_block_delta",
                                         "content_block_stop",  "content_block_start", "content_block_delta", "content_block_stop",
                                         "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                                         "content_block_start", "content_block_delta", "content_block_stop",  "message_delta",
                                         "message_stop"};
  ASSERT_EQ(names, want) << text;
  EXPECT_EQ(ev[0].second["message"]["usage"]["input_tokens"], 5);
  EXPECT_EQ(ev[0].second["message"]["content"], json::array());
  EXPECT_EQ(ev[1].second["content_block"]["type"], "thinking");
  EXPECT_EQ(ev[2].second["delta"], json({{"type", "thinking_delta"}, {"thinking", "Let me"}}));
  EXPECT_EQ(ev[5].second["index"], 1);
  EXPECT_EQ(ev[6].second["delta"], json({{"type", "text_delta"}, {"text", "Calling."}}));
  // A call without an id of the model's gets one; each call is its own block.
  const json first_call = ev[8].second["content_block"];
  EXPECT_EQ(first_call["type"], "tool_use");
  EXPECT_EQ(first_call["name"], "get_weather");
  EXPECT_EQ(first_call["id"].get<std::string>().rfind("toolu_", 0), 0u) << first_call.dump();
  EXPECT_EQ(ev[9].second["delta"]["partial_json"].get<std::string>() + ev[10].second["delta"]["partial_json"].get<std::string>(),
            "{\"city\":\"Paris\"}");
  EXPECT_EQ(ev[12].second["index"], 3);
  EXPECT_EQ(ev[12].second["content_block"]["id"], "call_b");
  EXPECT_EQ(ev[15].second["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(ev[15].second["usage"]["output_tokens"], 9);

  // The whole message names the calls as the stream did.
  auto again = anthropic_answer(req);
  r.timings.prompt_tokens = 5;
  r.timings.cached_tokens = 2;
  const json m = json::parse(again->whole(r, &reply, nullptr));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  ASSERT_EQ(m["content"].size(), 4u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][1], json({{"type", "text"}, {"text", "Calling."}}));
  EXPECT_EQ(m["content"][2]["input"], json({{"city", "Paris"}}));
  // What the prompt cache held is counted apart, as Anthropic counts a cache read.
  EXPECT_EQ(m["usage"], json({{"input_tokens", 3}, {"cache_read_input_tokens", 2}, {"cache_creation_input_tokens", 0},
                              {"output_tokens", 9}}));
}

TEST(Anthropic, StopReasonsAndErrorsAreAnthropics) {
  CompletionRequest req;
  req.model = "m";
  GenerateResult r;
  r.text = "Hi END";
  for (const auto& [finish, reason] : std::vector<std::pair<FinishReason, std::string>>{{FinishReason::eos, "end_turn"},
                                                                                         {FinishReason::length, "max_tokens"},
                                                                                         {FinishReason::context, "max_tokens"},
                                                                                         {FinishReason::cancelled, "max_tokens"}}) {
    r.finish = finish;
    const json m = json::parse(anthropic_answer(req)->whole(r, nullptr, nullptr));
    EXPECT_EQ(m["stop_reason"], reason);
    EXPECT_TRUE(m["stop_sequence"].is_null());
  }
  r.finish = FinishReason::stop;
  r.stop = "END";
  const json m = json::parse(anthropic_answer(req)->whole(r, nullptr, nullptr));
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
  const auto ev = events(anthropic_answer(req)->stream_error(ApiError{503, "server_error", "cancelled", "unloaded", 5, ""}));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].first, "error");
  EXPECT_EQ(ev[0].second, json({{"type", "error"}, {"error", {{"type", "overloaded_error"}, {"message", "unloaded"}}}}));
}
