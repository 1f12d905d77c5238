// Chat through llama.cpp's common library: the model's Jinja template against
// the built-in one, tools rendered and a tool call read back, a JSON schema
// as a grammar that the reply follows, and a reply no parser can read.
#include "engine/chat.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/ledger.h"
#include "engine/embed.h"
#include "engine/model.h"
#include "engine/session.h"
#include "engine/test_model.h"
#include "small_models.h"
#include "temp_path.h"

using namespace reclaim;
using reclaim::testing::small_load;
using reclaim::testing::small_model;
using reclaim::testing::small_session;
using nlohmann::json;

namespace {

// A small model with one of llama.cpp's real templates (models/templates).
std::string model_with_template(const std::string& name) {
  const std::string path = reclaim::testing::temp_path("chat-" + name + ".gguf");
  TestModelSpec s;
  s.vocab = "bpe";
  s.n_embd = 64;
  s.n_layer = 1;
  s.chat_template = llama_template(name);
  EXPECT_FALSE(s.chat_template.empty()) << name;
  make_test_model(s, path);
  return path;
}

ModelLoad load(const std::string& path) {
  ModelLoad l;
  l.path = path;
  return l;
}

const json kWeather = {{"type", "object"},
                       {"properties", {{"city", {{"type", "string"}}}}},
                       {"required", json::array({"city"})}};

ChatRequest weather_chat(ToolChoice choice) {
  ChatRequest r;
  r.messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}}).dump();
  r.tools.push_back({"get_weather", "Current weather of a city", kWeather.dump()});
  r.tool_choice = choice;
  return r;
}

GenerateResult greedy_on(Model& model, const std::string& prompt, const GrammarSpec& grammar = {}, int max_tokens = 24) {
  Session session(model, small_session(512));
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.grammar = grammar;
  return generate(session, r);
}

}  // namespace

TEST(Chat, TheModelsOwnTemplateANamedOneOrChatml) {
  Model bpe(small_load("bpe"));  // the qwen2 vocab carries its Jinja template
  std::vector<ChatMessage> msgs = {{"user", "hello"}};
  std::string p = apply_chat_template(bpe, msgs);
  EXPECT_NE(p.find("<|im_start|>user\nhello<|im_end|>"), std::string::npos) << p;
  EXPECT_NE(p.find("<|im_start|>assistant\n"), std::string::npos) << p;
  // Special tokens in it are parsed as single tokens.
  const llama_token im_start = tokenize(bpe.vocab(), "<|im_start|>", false)[0];
  EXPECT_EQ(tokenize(bpe.vocab(), "<|im_start|>", false).size(), 1u);
  EXPECT_EQ(tokenize(bpe.vocab(), p, false).front(), im_start);

  // No template in that vocab: chatml, as llama-server falls back.
  Model spm(small_load("spm"));
  EXPECT_TRUE(ChatTemplate(spm, "").uses_fallback());
  EXPECT_FALSE(ChatTemplate(bpe, "").uses_fallback());
  EXPECT_EQ(apply_chat_template(spm, msgs), "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_NE(apply_chat_template(spm, msgs, "llama2").find("[INST]"), std::string::npos);
  try {
    apply_chat_template(spm, msgs, "no-such-template");
    FAIL() << "no error";
  } catch (const ChatError& e) {
    EXPECT_NE(std::string(e.what()).find("neither Jinja text nor one of llama.cpp's built-in ones"), std::string::npos)
        << e.what();
  }
}

TEST(Chat, TheJinjaPathAndTheBuiltInOneGiveTheSamePromptAndGreedyReply) {
  // qwen2's own Jinja template is chatml once a system message is given.
  Model bpe(small_load("bpe"));
  const std::vector<ChatMessage> msgs = {
      {"system", "Be brief."}, {"user", "hello"}, {"assistant", "hi"}, {"user", "how are you?"}};
  const std::string jinja = apply_chat_template(bpe, msgs);
  const std::string builtin = apply_chat_template(bpe, msgs, "chatml");
  ASSERT_FALSE(ChatTemplate(bpe, "").builtin());
  ASSERT_TRUE(ChatTemplate(bpe, "chatml").builtin());
  EXPECT_EQ(jinja, builtin);
  const GenerateResult a = greedy_on(bpe, jinja);
  const GenerateResult b = greedy_on(bpe, builtin);
  ASSERT_FALSE(a.tokens.empty());
  EXPECT_EQ(a.tokens, b.tokens);
}

TEST(Chat, ToolsAreRenderedAndAToolCallIsReadAsItStreams) {
  Model m(load(model_with_template("Qwen-Qwen2.5-7B-Instruct")));
  ChatTemplate t(m, "");

  ChatRender automatic = t.render(weather_chat(ToolChoice::automatic));
  EXPECT_NE(automatic.prompt.find("get_weather"), std::string::npos);
  EXPECT_NE(automatic.prompt.find("Current weather of a city"), std::string::npos);
  // "auto": constrained only once the model opens a call.
  EXPECT_TRUE(automatic.grammar.lazy);
  EXPECT_FALSE(automatic.grammar.trigger_patterns.empty() && automatic.grammar.trigger_tokens.empty());

  ChatRender required = t.render(weather_chat(ToolChoice::required));
  EXPECT_FALSE(required.grammar.empty());
  EXPECT_FALSE(required.grammar.lazy);
  EXPECT_FALSE(required.grammar.prefill.empty());  // the reply's opening, which the prompt wrote
  EXPECT_TRUE(t.render(weather_chat(ToolChoice::none)).grammar.empty());

  // The reply, in pieces of three bytes as tokens might bring it.
  const std::string reply =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  ChatReader& reader = automatic.reader;
  ASSERT_TRUE(reader.parses());
  std::string id, name, arguments, content;
  for (size_t i = 0; i < reply.size(); i += 3) {
    for (const ChatDelta& d : reader.push(reply.substr(i, 3))) {
      content += d.content;
      if (d.tool_index == std::string::npos) continue;
      EXPECT_EQ(d.tool_index, 0u);
      if (!d.tool.id.empty()) id = d.tool.id;
      name += d.tool.name;
      arguments += d.tool.arguments;
    }
  }
  std::vector<ChatDelta> rest;
  const ChatReply whole = reader.finish(&rest);
  for (const ChatDelta& d : rest) arguments += d.tool.arguments;
  EXPECT_EQ(content, "");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(id.rfind("call_", 0), 0u) << id;
  EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}})) << arguments;
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].id, id);
  EXPECT_EQ(whole.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(whole.tool_calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(whole.content, "");

  // The transcript an agent sends back: the call, with null content, and
  // the tool's answer.
  ChatRequest replay = weather_chat(ToolChoice::automatic);
  json msgs = json::parse(replay.messages);
  msgs.push_back({{"role", "assistant"},
                  {"content", nullptr},
                  {"tool_calls", json::array({{{"id", id},
                                               {"type", "function"},
                                               {"function", {{"name", "get_weather"}, {"arguments", arguments}}}}})}});
  msgs.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "18 degrees, sunny"}});
  replay.messages = msgs.dump();
  const std::string prompt = t.render(replay).prompt;
  EXPECT_NE(prompt.find("18 degrees, sunny"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("\"Paris\""), std::string::npos) << prompt;
}

// A reply whose brackets nest deeper than llama.cpp's reply parser can
// follow (it recurses once a level) is read as the content it is, whole.
TEST(Chat, AReplyNestedDeeperThanTheParserFollowsIsContent) {
  Model m(load(model_with_template("Qwen-Qwen2.5-7B-Instruct")));
  ChatTemplate t(m, "");
  ChatRender r = t.render(weather_chat(ToolChoice::automatic));
  const std::string reply = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": " + std::string(200000, '[');
  r.reader.push(reply);
  const ChatReply whole = r.reader.finish();
  EXPECT_TRUE(whole.tool_calls.empty());
  EXPECT_EQ(whole.content, reply);
}

// Agents send their tools with every request: a template that cannot show
// them renders the chat without them, answered in text; only a call that is
// required is refused, with the field named.
TEST(Chat, TemplatesWithoutToolCallsRenderTheChatAndRefuseOnlyARequiredCall) {
  Model bpe(small_load("bpe"));  // qwen2's template has no tool calls
  for (const std::string& tmpl : {std::string(""), std::string("chatml")}) {
    for (ToolChoice choice : {ToolChoice::automatic, ToolChoice::none}) {
      ChatRender r = ChatTemplate(bpe, tmpl).render(weather_chat(choice));
      EXPECT_NE(r.prompt.find("Paris"), std::string::npos) << tmpl << ": " << r.prompt;
      EXPECT_EQ(r.prompt.find("get_weather"), std::string::npos) << tmpl << ": " << r.prompt;
      EXPECT_TRUE(r.grammar.empty()) << tmpl;
    }
    try {
      ChatTemplate(bpe, tmpl).render(weather_chat(ToolChoice::required));
      FAIL() << "no error for '" << tmpl << "'";
    } catch (const ChatError& e) {
      EXPECT_EQ(e.param(), "tool_choice");
      EXPECT_NE(std::string(e.what()).find("cannot be required"), std::string::npos) << e.what();
    }
  }
}

TEST(Chat, AJsonSchemaIsAGrammarTheGreedyReplyFollows) {
  Model bpe(small_load("bpe"));
  const json schema = {{"type", "object"},
                       {"properties", {{"n", {{"type", "integer"}}}}},
                       {"required", json::array({"n"})},
                       {"additionalProperties", false}};
  ChatRequest r;
  r.messages = json::array({{{"role", "user"}, {"content", "a number, as JSON"}}}).dump();
  r.json_schema = schema.dump();
  ChatRender render = ChatTemplate(bpe, "").render(r);
  ASSERT_FALSE(render.grammar.empty());
  const GenerateResult g = greedy_on(bpe, render.prompt, render.grammar, 400);
  ASSERT_EQ(g.finish, FinishReason::eos) << g.text;
  render.reader.push(g.text);
  const json got = json::parse(render.reader.finish().content);
  ASSERT_TRUE(got.is_object()) << g.text;
  EXPECT_TRUE(got["n"].is_number_integer()) << g.text;
  EXPECT_EQ(got.size(), 1u) << g.text;

  EXPECT_THROW(json_schema_grammar("{\"type\": \"no-such-type\"}"), ChatError);
}

TEST(Chat, AReplyTheParserCannotReadIsContentAsItCame) {
  // Qwen3's template reads reasoning out of <think>; random weights write
  // anything, invalid UTF-8 included (the stream makes it U+FFFD).
  Model m(load(model_with_template("Qwen-Qwen3-0.6B")));
  ChatRequest r;
  r.messages = json::array({{{"role", "user"}, {"content", "hi"}}}).dump();
  ChatRender render = ChatTemplate(m, "").render(r);
  const GenerateResult g = greedy_on(m, render.prompt, {}, 48);
  std::string streamed;
  for (size_t i = 0; i < g.text.size(); i += 5) {
    for (const ChatDelta& d : render.reader.push(g.text.substr(i, 5))) streamed += d.reasoning + d.content;
  }
  std::vector<ChatDelta> rest;
  const ChatReply reply = render.reader.finish(&rest);
  for (const ChatDelta& d : rest) streamed += d.reasoning + d.content;
  EXPECT_FALSE(reply.content.empty() && reply.reasoning.empty());
  EXPECT_EQ(streamed, reply.reasoning + reply.content);
}

TEST(Chat, LogprobsAreTheModelsOwnForEachTokenWithItsLikeliest) {
  Model bpe(small_load("bpe"));
  Session session(bpe, small_session(256));
  GenerateRequest r;
  r.prompt = "Once upon a time";
  r.max_tokens = 12;
  r.sampling.temperature = 0;
  r.logprobs = 3;
  std::vector<TokenLogprob> streamed;
  GenerateHooks hooks;
  hooks.on_logprobs = [&](std::vector<TokenLogprob> e) { streamed.insert(streamed.end(), e.begin(), e.end()); };
  const GenerateResult g = generate(session, r, hooks);
  ASSERT_EQ(g.logprobs.size(), g.tokens.size());
  ASSERT_EQ(streamed.size(), g.tokens.size());
  for (size_t i = 0; i < g.tokens.size(); ++i) {
    const TokenLogprob& e = g.logprobs[i];
    EXPECT_EQ(e.token, g.tokens[i]);
    EXPECT_EQ(streamed[i].token, e.token);
    EXPECT_LE(e.logprob, 0.0f);
    ASSERT_EQ(e.top.size(), 3u);
    // Greedy picks the likeliest, and the list is likeliest first.
    EXPECT_EQ(e.top[0].first, e.token);
    EXPECT_FLOAT_EQ(e.top[0].second, e.logprob);
    EXPECT_GE(e.top[0].second, e.top[1].second);
    EXPECT_GE(e.top[1].second, e.top[2].second);
  }
  // Not asked for, none.
  r.logprobs = -1;
  EXPECT_TRUE(generate(session, r).logprobs.empty());
}

TEST(Embed, EachInputIsOneUnitVectorAndTheContextGoesWithTheRequest) {
  Model bpe(small_load("bpe"));
  EXPECT_EQ(embedding_pooling(bpe), LLAMA_POOLING_TYPE_MEAN);  // a chat model has none of its own
  const std::vector<llama_token> a = tokenize(bpe.vocab(), "the river runs", true);
  const std::vector<llama_token> b = tokenize(bpe.vocab(), "a cat sat on the mat, twice over", true);
  const EmbedResult r = embed(bpe, {a, b, a});
  ASSERT_EQ(r.vectors.size(), 3u);
  EXPECT_EQ(r.prompt_tokens, static_cast<int32_t>(2 * a.size() + b.size()));
  for (const std::vector<float>& v : r.vectors) {
    ASSERT_EQ(v.size(), static_cast<size_t>(llama_model_n_embd(bpe.get())));
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    EXPECT_NEAR(norm, 1.0, 1e-4);
  }
  EXPECT_EQ(r.vectors[0], r.vectors[2]);  // the same input, the same vector, whatever came between
  EXPECT_NE(r.vectors[0], r.vectors[1]);
  // Its context was the request's: nothing of it stays under the model.
  for (const LedgerEntry& e : Ledger::process().entries()) {
    EXPECT_EQ(e.owner.find("request:"), std::string::npos) << e.owner << " " << e.label;
  }
  EXPECT_THROW(embed(bpe, {a, {}}), BadPrompt);
}
