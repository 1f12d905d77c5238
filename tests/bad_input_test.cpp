// A corpus of malformed requests, bodies and transport: each is answered
// with a 4xx (never a 5xx: a client's mistake is the client's), or for what
// is not HTTP at all the connection is closed; the server answers the next
// good request and holds nothing of the bad ones afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "served.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

struct Bad {
  std::string name, path, body;
};

json good_chat() { return chat(2); }
json good_completion() { return {{"model", "bpe"}, {"prompt", "hello"}, {"max_tokens", 2}, {"temperature", 0}}; }

std::vector<Bad> corpus() {
  std::vector<Bad> out;
  const std::string chat_path = "/v1/chat/completions", completion_path = "/v1/completions";
  // Not JSON, or not an object.
  for (const std::string& b : std::vector<std::string>{"", "{", "}", "[", "nul", "{\"model\":}", "{'model':'bpe'}", "{}x", "[]", "\"bpe\"", "42",
                               "null", "{\"model\":\"bpe\",}", "{\"model\" \"bpe\"}", std::string(100000, '['),
                               std::string("{\"model\":\"bpe\"\0}", 16), "NaN", "{\"temperature\":NaN}",
                               "{\"max_tokens\":Infinity}"}) {
    out.push_back({"body " + b.substr(0, 24), chat_path, b});
    out.push_back({"body " + b.substr(0, 24), "/v1/models/load", b});
    for (const char* path : {"/tokenize", "/detokenize", "/apply-template", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses",
                             "/completion", "/rerank", "/v1/chat/completions/input_tokens", "/v1/responses/input_tokens",
                             "/models/load", "/models/unload", "/models", "/v1/streams/lookup"}) {
      out.push_back({"body " + b.substr(0, 24), path, b});
    }
  }
  // A field with each wrong value, on a request otherwise good.
  auto field = [&](const std::string& path, json base, const std::string& key, const std::vector<json>& values) {
    for (const json& v : values) {
      json j = base;
      j[key] = v;
      out.push_back({path + " " + key + "=" + v.dump().substr(0, 40), path, j.dump()});
    }
  };
  const std::vector<json> not_a_string = {1, nullptr, json::array(), json::object(), true};
  field(chat_path, good_chat(), "model", {1, nullptr, json::array(), json::object(), true, "", "nope", "../bpe", "/etc/passwd",
                                          "a/b", "..", "bpe\\x", std::string("bpe\0", 4), std::string(10000, 'm')});
  field(chat_path, good_chat(), "messages",
        {"hello", 1, json::array(), json::array({1}), json::array({{{"role", 1}, {"content", "x"}}}),
         json::array({{{"role", "user"}}}), json::array({{{"role", "user"}, {"content", 1}}}),
         json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}}}),
         json::array({{{"role", "user"}, {"content", json::array({{{"type", 1}, {"text", "x"}}})}}}),
         json::array({{{"role", "user"}, {"content", json::array({1})}}})});
  for (const std::string& key : {"max_tokens", "max_completion_tokens"}) {
    field(chat_path, good_chat(), key, {"10", -1, 0, 1e30, 1.5, true, 99999999999LL, json::array()});
  }
  field(chat_path, good_chat(), "temperature", {"hot", -1, 3, 1e308, true, json::object()});
  const json rerank = {{"model", "bpe"}, {"query", "q"}, {"documents", {"a", "b"}}};
  field("/rerank", rerank, "query", {1, nullptr, json::array(), json::object()});
  field("/rerank", rerank, "documents", {1, nullptr, "a", json::array(), json::array({1}), json::array({json::object()}),
                                         json::array({json{{"text", 1}}})});
  field("/rerank", rerank, "top_n", {0, -1, "2", 1.5, json::array()});
  field("/rerank", rerank, "return_documents", {"yes", 1});
  field("/rerank", rerank, "model", {1, "nope", "spm"});  // spm: not a reranker
  field(chat_path, good_chat(), "top_p", {0, 2, -0.5, "x", false});
  field(chat_path, good_chat(), "min_p", {-1, 2, "x"});
  field(chat_path, good_chat(), "top_k", {"x", 1.5, 1e20});
  field(chat_path, good_chat(), "seed", {"x", 1.5, true});
  field(chat_path, good_chat(), "stop", {1, json::array({1}), json::array({"a", "b", "c", "d", "e"}), json::object()});
  field(chat_path, good_chat(), "stream", {"yes", 1});
  field(chat_path, good_chat(), "stream_options", {1, "x", json{{"include_usage", "yes"}}});
  field(chat_path, good_chat(), "n", {9, "x", 0, -1});
  field(chat_path, good_chat(), "keep_alive", {"forever", "5x", "x5m", 1e300, "1e300h", json::array()});
  field(completion_path, good_completion(), "prompt",
        {1, json::object(), json::array(), json::array({json::array({1, 2})}), json::array({1.5}), json::array({true}),
         json::array({999999999}), json::array({-1}), json::array({0, 2147483647}), json::array({4294967297LL}),
         json::array({-9999999999LL}), std::string(200000, 'x')});
  // Not UTF-8, written by hand: nlohmann will not write it.
  for (const std::string& bytes : std::vector<std::string>{"\xff\xfe", "a\xc0\xafz", "\xed\xa0\x80", "\xf4\x90\x80\x80", "abc\xe2\x82"}) {
    out.push_back({"prompt not UTF-8", completion_path, "{\"model\":\"bpe\",\"prompt\":\"" + bytes + "\"}"});
  }
  // Invalid UTF-8 in other strings, and a lone surrogate escape.
  out.push_back({"role not UTF-8", chat_path, "{\"model\":\"bpe\",\"messages\":[{\"role\":\"\xff\",\"content\":\"x\"}]}"});
  out.push_back({"model not UTF-8", chat_path, "{\"model\":\"b\xc3\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}"});
  out.push_back({"lone surrogate", chat_path, R"({"model":"bpe","messages":[{"role":"user","content":"\ud800"}]})"});
  // Nested deeper than any request needs, where the server would write the
  // value out again: a text part's extra field, a tool's parameters, a
  // schema, a field it does not know.
  // (Written by hand: nlohmann writes a value out by recursion, which these
  // would take past this test's own stack.)
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto deep_in = [&](const std::string& path, json base, const std::vector<std::string>& at) {
    json* p = &base;
    for (const std::string& k : at) p = &(*p)[k];
    *p = "@deep@";
    std::string body = base.dump();
    body.replace(body.find("\"@deep@\""), 8, deep);
    out.push_back({path + " nested 100000 deep at " + at.back(), path, body});
  };
  out.push_back({"part nested 100000 deep", chat_path,
                 "{\"model\":\"bpe\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\","
                 "\"extra\":" + deep + "}]}]}"});
  deep_in(chat_path, good_chat(), {"tools"});
  deep_in(chat_path, good_chat(), {"response_format", "json_schema", "schema"});
  deep_in(chat_path, good_chat(), {"no_such_field"});
  field(chat_path, good_chat(), "chat_template_kwargs",
        {"think", 1, json::array(), json{{"enable_thinking", "no"}}, json{{"enable_thinking", 0}}});
  deep_in("/v1/embeddings", json{{"model", "bpe"}}, {"input"});
  // llama-server's own.
  field("/tokenize", json{{"model", "bpe"}, {"content", "x"}}, "content",
        {1, json::object(), json::array({1.5}), json::array({json::array({1})}), json::array({-1}), json::array({4294967297LL}),
         json::array({999999999}), json::array({true})});
  for (const std::string& key : {"add_special", "parse_special", "with_pieces"}) {
    field("/tokenize", json{{"model", "bpe"}, {"content", "x"}}, key, {"yes", 1, json::array()});
  }
  field("/tokenize", json{{"model", "bpe"}, {"content", "x"}}, "model", {1, "nope", "../x", json::array()});
  field("/detokenize", json{{"model", "bpe"}, {"tokens", {1}}}, "tokens",
        {"x", 1, json::array({"a"}), json::array({-1}), json::array({999999999}), json::array({1.5}), json::object()});
  field("/apply-template", good_chat(), "messages", {"hello", 1, json::array(), json::array({{{"role", "user"}}})});
  const json native = {{"model", "bpe"}, {"prompt", "x"}, {"n_predict", 2}};
  field("/completion", native, "n_predict", {"2", 1.5, true, json::array(), 99999999999LL});
  field("/completion", native, "prompt", {1, json::object(), json::array({1.5}), json::array({999999999}), nullptr});
  field("/completion", native, "return_tokens", {"yes", 1});
  // Anthropic's: answered in its own shape, {"type": "error", "error": {"type", "message"}}.
  const json message = {{"model", "bpe"}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  field("/v1/messages", message, "max_tokens", {"2", -1, 0, 1.5, nullptr, json::array()});
  field("/v1/messages", message, "messages",
        {"hi", json::array(), json::array({1}), json::array({{{"role", "system"}, {"content", "x"}}}),
         json::array({{{"role", "user"}}}), json::array({{{"role", "user"}, {"content", 1}}}),
         json::array({{{"role", "user"}, {"content", json::array({{{"type", "image"}}})}}}),
         json::array({{{"role", "user"}, {"content", json::array({{{"type", "tool_result"}}})}}}),
         json::array({{{"role", "assistant"}, {"content", json::array({{{"type", "tool_use"}, {"id", 1}, {"name", "f"}}})}}}),
         json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}}})}}})});
  field("/v1/messages", message, "system", {1, json::object(), json::array({1}), json::array({{{"type", "image"}}})});
  field("/v1/messages", message, "tools", {1, "x", json::array({1}), json::array({{{"type", "bash_20250124"}, {"name", "bash"}}})});
  field("/v1/messages", message, "tool_choice", {"auto", 1, json::object(), json{{"type", "tool"}}});
  field("/v1/messages", message, "stop_sequences", {"END", json::array({1}), json::array({"a", "b", "c", "d", "e"})});
  field("/v1/messages", message, "temperature", {"warm", -1, 3});
  field("/v1/messages", message, "model", {1, "nope", "../x"});
  field("/v1/messages/count_tokens", message, "messages", {json::array(), "hi"});
  // OpenAI's Responses.
  const json response = {{"model", "bpe"}, {"max_output_tokens", 2}, {"input", "hi"}};
  field("/v1/responses", response, "input",
        {1, nullptr, json::array(), json::array({1}), json::array({{{"role", "robot"}, {"content", "x"}}}),
         json::array({{{"role", "user"}, {"content", 1}}}), json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}}})}}}),
         json::array({{{"type", "function_call"}, {"name", "f"}}}), json::array({{{"type", "function_call_output"}, {"call_id", "c"}}}),
         json::array({{{"type", "computer_call"}}})});
  field("/v1/responses", response, "instructions", {1, json::array()});
  field("/v1/responses", response, "previous_response_id", {"resp_1"});
  field("/v1/responses", response, "tools", {1, json::array({{{"type", "web_search"}}}), json::array({{{"type", "function"}}})});
  field("/v1/responses", response, "tool_choice", {1, "sometimes", json{{"type", "function"}}});
  field("/v1/responses", response, "text", {1, json{{"format", {{"type", "yaml"}}}}});
  field("/v1/responses", response, "max_output_tokens", {"2", -1, 1.5});
  // The control endpoints.
  field("/v1/models/load", json{{"model", "bpe"}}, "model", {1, nullptr, "nope", "../x", ""});
  field("/v1/models/load", json{{"model", "bpe"}}, "pin", {"yes", 1});
  field("/v1/models/pin", json{{"model", "bpe"}}, "model", {1, nullptr, "nope", "../x", ""});
  field("/v1/models/pin", json{{"model", "bpe"}}, "pin", {"yes", 1, json::array()});
  field("/v1/models/unload", json{{"model", "bpe"}}, "model", {1, "nope", "a/b"});
  field("/v1/models/unload", json{{"model", "bpe"}}, "mode", {"later", 1, json::array()});
  field("/v1/models/unload", json{{"model", "bpe"}}, "timeout", {"soon", 1e300, json::object()});
  // llama-server's router's and its resumable streams'.
  field("/models/load", json{{"model", "bpe"}}, "model", {1, nullptr, "nope", "../x", ""});
  field("/models/unload", json{{"model", "bpe"}}, "model", {1, nullptr, "nope", "../x"});
  field("/models", json{{"model", "x/y"}}, "model", {1, nullptr, "", "a/b/c/d", json::array()});
  field("/models", json{{"model", "x/y"}}, "insecure", {"yes", 1, true});
  field("/v1/streams/lookup", json{{"conversation_ids", json::array()}}, "conversation_ids", {"x", 1, json::array({1})});
  return out;
}

// Ollama's endpoints: the same kinds of mistakes, answered with Ollama's
// {"error": "..."}.
std::vector<Bad> ollama_corpus() {
  std::vector<Bad> out;
  const json chat = {{"model", "bpe"}, {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
                     {"stream", false}, {"options", {{"num_predict", 2}}}};
  const json generate = {{"model", "bpe"}, {"prompt", "hello"}, {"stream", false}, {"options", {{"num_predict", 2}}}};
  const json embed = {{"model", "bpe"}, {"input", "hello"}};
  for (const std::string& path : {"/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/show"}) {
    for (const std::string& b : std::vector<std::string>{"", "{", "[]", "42", "null", "{\"model\":}", std::string(100000, '['),
                                                         "{\"model\":\"b\xc3\"}"}) {
      out.push_back({path + " body " + b.substr(0, 24), path, b});
    }
  }
  auto field = [&](const std::string& path, json base, const std::string& key, const std::vector<json>& values) {
    for (const json& v : values) {
      json j = base;
      j[key] = v;
      out.push_back({path + " " + key + "=" + v.dump().substr(0, 40), path, j.dump()});
    }
  };
  for (const std::string& path : {"/api/chat", "/api/generate"}) {
    const json& base = path == "/api/chat" ? chat : generate;
    field(path, base, "model", {1, nullptr, json::array(), "", "nope", "../bpe", "a/b", std::string(10000, 'm')});
    field(path, base, "options",
          {1, "x", json{{"temperature", "hot"}}, json{{"temperature", -1}}, json{{"num_predict", "x"}}, json{{"num_predict", 1.5}},
           json{{"num_predict", 1e30}}, json{{"stop", "x"}}, json{{"stop", json::array({1})}}, json{{"top_p", 2}},
           json{{"seed", "x"}}, json{{"top_k", 1e20}}});
    field(path, base, "format", {"yaml", 1, json::array(), true});
    field(path, base, "keep_alive", {"forever", "5x", "x5m", 1e300, "1e300h", json::array(), "1h30"});
    field(path, base, "stream", {"yes", 1});
    field(path, base, "think", {1, json::array()});
  }
  field("/api/chat", chat, "messages",
        {"hello", 1, json::array({1}), json::array({{{"role", 1}, {"content", "x"}}}), json::array({{{"role", "user"}}}),
         json::array({{{"role", "user"}, {"content", 1}}}), json::array({{{"role", "user"}, {"content", "x"}, {"images", {"aGk="}}}}),
         json::array({{{"role", "assistant"}, {"tool_calls", "x"}}}), json::array({{{"role", "assistant"}, {"tool_calls", {1}}}}),
         json::array({{{"role", "user"}, {"content", "x"}, {"thinking", 1}}}), json::array({{{"role", "wizard"}, {"content", "x"}}})});
  field("/api/chat", chat, "tools", {1, json::array({1}), json::array({{{"type", "function"}}})});
  field("/api/generate", generate, "prompt", {1, json::array(), json::object()});
  field("/api/generate", generate, "system", {1, json::array()});
  field("/api/generate", generate, "raw", {"yes", 1});
  field("/api/generate", generate, "suffix", {"x", 1});
  field("/api/generate", generate, "template", {"{{ .Prompt }}"});
  field("/api/generate", generate, "context", {json::array({1, 2}), "x"});
  field("/api/generate", generate, "images", {json::array({"aGk="}), "x"});
  field("/api/embed", embed, "input", {1, json::array(), json::array({1}), json::object(), "", json::array({"a", 1})});
  field("/api/embed", embed, "truncate", {"yes", 1});
  field("/api/embed", embed, "dimensions", {8});
  field("/api/embed", embed, "model", {1, "nope", nullptr});
  field("/api/embeddings", {{"model", "bpe"}, {"prompt", "x"}}, "prompt", {1, json::array({"a"}), nullptr});
  field("/api/show", {{"model", "bpe"}}, "model", {1, "nope", nullptr, "../x"});
  // Names that are not one are refused before anything is fetched.
  for (const std::string& b : std::vector<std::string>{"", "{", "[]", "null", std::string(100000, '[')}) {
    out.push_back({"/api/pull body " + b.substr(0, 24), "/api/pull", b});
  }
  field("/api/pull", {{"model", "x"}}, "model", {1, nullptr, "", "../x", "a/b/c/d", "x y", "x:../y", std::string(10000, 'm')});
  field("/api/pull", {{"model", "a/b/c/d"}}, "insecure", {"yes", 1});
  field("/api/pull", {{"model", "a/b/c/d"}}, "stream", {"yes", 1});
  return out;
}

// The status line of an HTTP response, or 0.
int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

// Posts each case: every answer a 4xx whose body `has_error` accepts.
template <class HasError>
void expect_each_refused(Served& s, const std::vector<Bad>& cases, HasError has_error) {
  for (const Bad& c : cases) {
    auto r = s.http().Post(c.path.c_str(), c.body, "application/json");
    ASSERT_TRUE(r) << c.name << ": no answer";
    EXPECT_GE(r->status, 400) << c.name << ": " << r->body;
    EXPECT_LT(r->status, 500) << c.name << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error") && has_error(j["error"])) << c.name << ": " << r->body;
  }
}

}  // namespace

TEST(BadInput, EveryMalformedBodyIsA4xxThatSaysWhat) {
  Served s;
  const std::vector<Bad> cases = corpus();
  EXPECT_GE(cases.size(), 150u);
  // OpenAI's error object.
  expect_each_refused(s, cases, [](const json& e) { return e.is_object() && e.contains("message") && e["message"].is_string(); });
  auto good = s.post("/v1/chat/completions", good_chat());
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  s.expect_clean();
}

TEST(BadInput, EveryMalformedOllamaBodyIsA4xxWithOllamasError) {
  Served s;
  const std::vector<Bad> cases = ollama_corpus();
  EXPECT_GE(cases.size(), 120u);
  // Ollama's: the message alone.
  expect_each_refused(s, cases, [](const json& e) { return e.is_string() && !e.get<std::string>().empty(); });
  auto good = s.post("/api/chat", {{"model", "bpe"}, {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
                                   {"stream", false}, {"options", {{"num_predict", 2}}}});
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  s.expect_clean();
}

// Grammars and schemas that would crash or stall llama.cpp's grammar parser,
// written here: each is a 400 that names its field and the bound it broke,
// answered at once, and a good request is answered before and after.
TEST(BadInput, HostileGrammarsAndSchemasAreRefusedByNameAtOnce) {
  Served s;
  struct Case {
    std::string name;
    json extra;
    std::string field, says;
  };
  std::string chain = "root ::= r1\n";
  for (int i = 1; i < 10001; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  chain += "r10001 ::= \"a\"\n";
  const std::vector<Case> cases = {
      {"groups nested 200,000 deep", {{"grammar", "root ::= " + std::string(200000, '(') + "\"a\"" + std::string(200000, ')')}},
       "grammar", "nests groups more than 1000 deep"},
      {"a chain of 10,002 rules", {{"grammar", chain}}, "grammar", "10002 rules, more than the limit of 10000"},
      {"3 MiB of grammar", {{"grammar", "root ::= \"" + std::string(3u << 20, 'a') + "\""}}, "grammar",
       "more than the limit of 2097152"},
      {"a string schema of minLength 5,000,000",
       {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "string"}, {"minLength", 5000000}}}}}}}},
       "response_format", "cannot parse"},
      {"a repetition of 100,000", {{"grammar", "root ::= \"a\"{100000}"}}, "grammar", "not a GBNF grammar llama.cpp can parse"},
  };
  auto good = [&] {
    auto r = s.post("/v1/completions", good_completion());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  };
  good();
  for (const Case& c : cases) {
    json body = good_completion();
    body.update(c.extra);
    const auto start = std::chrono::steady_clock::now();
    auto r = s.post("/v1/completions", body);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, 400) << c.name << ": " << r->body;
    const json e = json::parse(r->body, nullptr, false)["error"];
    EXPECT_EQ(e["param"], c.field) << c.name << ": " << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(c.says), std::string::npos) << c.name << ": " << r->body;
    EXPECT_LT(seconds, 10) << c.name;
  }
  good();
  s.expect_clean();
}

// Fields whose size or spelling would cost the server memory or its decode
// thread's time out of proportion to the body, and fields of the wrong type
// deep in a message: each a 400 naming the field.
TEST(BadInput, FieldsThatWouldCostOutOfProportionOrHaveTheWrongTypeAreNamed) {
  Served s;
  struct Case {
    std::string name, path;
    json body;
    std::string param, says;
  };
  const json user = json::array({{{"role", "user"}, {"content", "hi"}}});
  const json chat = {{"model", "bpe"}, {"messages", user}, {"max_tokens", 2}};
  const json message = {{"model", "bpe"}, {"max_tokens", 2}, {"messages", user}};
  const json response = {{"model", "bpe"}, {"max_output_tokens", 2}, {"input", "hi"}};
  const json ollama = {{"model", "bpe"}, {"messages", user}, {"stream", false}, {"options", {{"num_predict", 2}}}};
  auto with = [](json j, const json& more) {
    j.update(more);
    return j;
  };
  json many_inputs = json::array();
  for (int i = 0; i < 2049; ++i) many_inputs.push_back("x");
  json many_stops = json::array();
  for (int i = 0; i < 17; ++i) many_stops.push_back("stop" + std::to_string(i));
  std::string many_tokens;
  for (int i = 0; i < (1 << 20) + 8; ++i) many_tokens += " a";
  const std::vector<Case> cases = {
      {"embeddings of 2,049 inputs", "/v1/embeddings", {{"model", "bpe"}, {"input", many_inputs}}, "input", "2049 inputs"},
      {"Ollama's embeddings of 2,049 inputs", "/api/embed", {{"model", "bpe"}, {"input", many_inputs}}, "input", "2049 inputs"},
      {"17 Ollama stops", "/api/chat", with(ollama, {{"options", {{"stop", many_stops}}}}), "options.stop", "17 stop strings"},
      {"an Ollama stop of 257 bytes", "/api/chat", with(ollama, {{"options", {{"stop", {std::string(257, 's')}}}}}),
       "options.stop", "257 bytes"},
      {"a stop of 257 bytes", "/v1/chat/completions", with(chat, {{"stop", std::string(257, 's')}}), "stop", "257 bytes"},
      {"an Anthropic stop of 257 bytes", "/v1/messages", with(message, {{"stop_sequences", {std::string(257, 's')}}}),
       "stop_sequences", "257 bytes"},
      {"n of 2 on llama-server's /completion", "/completion", {{"model", "bpe"}, {"prompt", "x"}, {"n", 2}}, "n",
       "lists of choices"},
      {"a logit bias of token 01", "/v1/chat/completions", with(chat, {{"logit_bias", {{"01", 5}}}}), "logit_bias", "'01'"},
      {"a logit bias of token +1", "/v1/chat/completions", with(chat, {{"logit_bias", {{"+1", 5}}}}), "logit_bias", "'+1'"},
      {"repeat_last_n -2", "/v1/chat/completions", with(chat, {{"repeat_last_n", -2}}), "repeat_last_n", "-1 (the whole context)"},
      {"tokenize 1,048,584 tokens", "/tokenize", {{"model", "bpe"}, {"content", many_tokens}}, "content", "more than the limit"},
      {"a tool of type 1", "/v1/chat/completions", with(chat, {{"tools", {{{"type", 1}, {"function", {{"name", "f"}}}}}}}),
       "tools[0].type", "must be a string"},
      {"a tool choice of type 1", "/v1/chat/completions", with(chat, {{"tool_choice", {{"type", 1}, {"function", {{"name", "f"}}}}}}),
       "tool_choice.type", "must be a string"},
      {"an Anthropic role 1", "/v1/messages", with(message, {{"messages", {{{"role", 1}, {"content", "hi"}}}}}),
       "messages[0].role", "must be a string"},
      {"an Anthropic tool of type 1", "/v1/messages", with(message, {{"tools", {{{"type", 1}, {"name", "f"}}}}}), "tools[0].type",
       "must be a string"},
      {"a Responses role 1", "/v1/responses", with(response, {{"input", {{{"role", 1}, {"content", "x"}}}}}), "input[0].role",
       "must be a string"},
      {"a Responses part of type 1", "/v1/responses",
       with(response, {{"input", {{{"role", "user"}, {"content", {{{"type", 1}, {"text", "x"}}}}}}}}), "input[0].content[0].type",
       "must be a string"},
      {"a Responses tool of type 1", "/v1/responses", with(response, {{"tools", {{{"type", 1}}}}}), "tools[0].type",
       "must be a string"},
      {"a Responses format of type 1", "/v1/responses", with(response, {{"text", {{"format", {{"type", 1}}}}}}), "text.format.type",
       "must be a string"},
      {"a Responses schema named 1", "/v1/responses",
       with(response, {{"text", {{"format", {{"type", "json_schema"}, {"name", 1}, {"schema", json::object()}}}}}}),
       "text.format.name", "must be a string"},
      {"an Ollama tool call of id 5", "/api/chat",
       with(ollama, {{"messages", {{{"role", "assistant"}, {"content", ""}, {"tool_calls", {{{"id", 5}, {"function", {{"name", "f"}}}}}}}}}}),
       "messages[0].tool_calls[0].id", "must be a string"},
  };
  for (const Case& c : cases) {
    auto r = s.post(c.path, c.body);
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, 400) << c.name << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    const std::string text = j.dump();
    // OpenAI's shape names the field in `param`; Ollama's and Anthropic's
    // in the message.
    if (j.is_object() && j["error"].is_object() && j["error"].contains("param")) EXPECT_EQ(j["error"]["param"], c.param) << c.name;
    EXPECT_NE(text.find(c.param), std::string::npos) << c.name << ": " << r->body;
    EXPECT_NE(text.find(c.says), std::string::npos) << c.name << ": " << r->body;
  }
  // A stream's byte past what it sent, and one past any size.
  s.http().Post("/v1/chat/completions", {{"X-Conversation-Id", "c1"}}, with(chat, {{"stream", true}}).dump(), "application/json");
  for (const char* from : {"100000000", "18446744073709551615"}) {
    expect_error(s.http().Get(std::string("/v1/stream?conv_id=c1&from=") + from), 400, "past the");
  }
  (void)s.http().Delete("/v1/stream?conv_id=c1");
  s.expect_clean();
}

// A repeat penalty's window is a buffer of its length: one longer than the
// context is the context (as -1 is, llama.cpp's "the context"), not the 8 GiB
// that INT32_MAX tokens would take.
TEST(BadInput, APenaltyWindowLongerThanTheContextIsTheContext) {
  Served s;
  for (const json& n : {json(2147483647), json(-1)}) {
    json body = chat(2);
    body["repeat_last_n"] = n;
    body["presence_penalty"] = 0.5;
    auto r = s.post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  auto o = s.post("/api/chat", {{"model", "bpe"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                                {"stream", false}, {"options", {{"num_predict", 2}, {"repeat_last_n", 2147483647}}}});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, 200) << o->body;
  // The most the server's memory ever held, from outside: far below 8 GiB.
  std::ifstream status("/proc/" + std::to_string(s.pid()) + "/status");
  int64_t peak_kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) peak_kib = std::stoll(line.substr(6));
  }
  EXPECT_GT(peak_kib, 0);
  EXPECT_LT(peak_kib, int64_t{1} << 20) << "the server's peak RSS, KiB";
  s.expect_clean();
}

TEST(BadInput, TransportAbuseIsRefusedOrClosedAndTheServerStaysWhole) {
  Served s({"--read-timeout", "1s"});
  struct Case {
    std::string name, bytes;
  };
  const std::string body = good_chat().dump();
  const std::vector<Case> cases = {
      {"not HTTP", "GARBAGE\r\n\r\n"},
      {"no version", "GET /health\r\n\r\n"},
      {"bad Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"},
      {"negative Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"},
      {"huge Content-Length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n"},
      {"oversize body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n" +
                            std::string(9000000, ' ')},
      {"URI too long", "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"header line too long", "GET /health HTTP/1.1\r\nX-A: " + std::string(20000, 'a') + "\r\n\r\n"},
      {"header flood", [] {
         std::string h = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
         for (int i = 0; i < 5000; ++i) h += "X-" + std::to_string(i) + ": y\r\n";
         return h + "\r\n";
       }()},
      {"truncated chunked body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 "ff\r\n{\"model\":"},
      {"bad chunk size", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
      {"body shorter than its length", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":"},
      {"unknown path", "GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"wrong method", "DELETE /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"},
  };
  for (const Case& c : cases) {
    RawClient raw(s.port());
    ASSERT_TRUE(raw.connected()) << c.name;
    raw.send(c.bytes);  // the server may close before it has all of it
    raw.closed_by_server(10);  // an answer then a close, or the read timeout's cut
    const int status = status_of(raw.received());
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << c.name << ": " << raw.received().substr(0, 200);
    if (c.name == "header flood") EXPECT_EQ(status, 431) << raw.received().substr(0, 200);
  }
  // Pipelined: two requests in one write. httplib 0.11 reads past the end of
  // the first and drops the rest, so the second has no answer; the first
  // does, and the connection ends at the keep-alive timeout.
  {
    RawClient raw(s.port());
    raw.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_TRUE(raw.closed_by_server(10));
    EXPECT_EQ(status_of(raw.received()), 200) << raw.received();
  }
  // A byte a second is cut at the read timeout, long before the request is whole.
  {
    RawClient raw(s.port());
    const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\n\r\n" + body;
    bool cut = false;
    for (size_t i = 0; i < req.size() && !cut; ++i) cut = !raw.send(req.substr(i, 1)) || raw.closed_by_server(1.0);
    EXPECT_TRUE(cut);
    EXPECT_EQ(status_of(raw.received()), 0) << raw.received();
  }
  auto good = s.post("/v1/chat/completions", good_chat());
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200) << good->body;
  s.expect_clean();
}
