// The text a request makes the server process, written to hurt it: chat
// templates that recurse, allocate, loop, nest and raise, each in a model
// file of its own served beside a good model. Each is answered with its 422
// (the model file's defect) within its bound, the good model answers before
// and after, and nothing is left over at the end.
#include <httplib.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>

#include "served.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

json user(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// A test model whose chat template is `jinja`; its -m argument.
std::string model_with_template(const std::string& name, const std::string& jinja) {
  const std::string tmpl = temp_path("hostile-" + name + ".jinja");
  std::ofstream(tmpl) << jinja;
  const std::string path = temp_path("hostile-" + name + ".gguf");
  const Result made = run("make-test-model --out " + path + " --vocab bpe --embd 64 --layers 1 --type q8_0 --chat-template " + tmpl);
  EXPECT_EQ(made.status, 0) << made.out << made.err;
  return path + ":" + name;
}

std::string metrics_of(Served& s) {
  auto r = s.http().Get("/metrics");
  return r ? r->body : std::string();
}

// Posts `body` to `path` on a raw socket and returns once the server is
// serving it (its in-flight gauge says so): a client whose request runs.
std::unique_ptr<RawClient> post_in_flight(Served& s, const std::string& path, const json& body) {
  auto c = std::make_unique<RawClient>(s.port());
  EXPECT_TRUE(c->connected());
  EXPECT_TRUE(c->post(path, body.dump()));
  EXPECT_TRUE(s.until([&] { return metrics_of(s).find("reclaim_requests_in_flight 1") != std::string::npos; }, 30))
      << metrics_of(s);
  return c;
}

// A client that leaves while its request runs: the server counts it gone,
// not as the error that the request's own bound would have given.
void expect_leaving_stops_it(Served& s, const std::string& path, const json& body) {
  post_in_flight(s, path, body).reset();
  EXPECT_TRUE(s.until([&] { return metrics_of(s).find("reclaim_requests_total{outcome=\"client_gone\"} 1") != std::string::npos; }, 30))
      << metrics_of(s);
  EXPECT_EQ(metrics_of(s).find("reclaim_requests_total{outcome=\"error\"} 1"), std::string::npos) << "its bound ended it, not the client";
}

struct Hostile {
  std::string name;
  std::string jinja;
  std::string says;  // what the answer's message holds
  int status = 422;  // a template that raises refuses the chat: the client's (400)
  std::string code = "invalid_model_file";
};

// Each opens the assistant's turn the way a real template does after its
// hostile part, so that a template that got through would render.
std::vector<Hostile> hostile_templates() {
  const std::string tail = "<|assistant|>";
  return {
      {"recurses", "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}" + tail, "nests its execution deeper than"},
      {"nests", repeat("{% if true %}", 100000) + "x" + repeat("{% endif %}", 100000) + tail, "nests deeper than"},
      {"chains", "{{ 1" + repeat(" + 1", 200000) + " }}" + tail, "nests deeper than"},
      {"loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + tail, "over a bound"},
      {"ranges", "{{ range(10000000000)|length }}" + tail, "range() of a length"},
      {"repeats", "{{ 'x' * 10000000000 }}" + tail, "a string repeated"},
      {"doubles", "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}" + tail,
       "MiB of strings and items"},
      {"holds-itself", "{% set a = [] %}{{ a.append(a) }}{{ a|tojson }}" + tail, "would hold itself"},
      {"deep-value",
       "{% set ns = namespace(cur=[]) %}{% set root = ns.cur %}{% for i in range(1000000) %}{% set n = [] %}{{ ns.cur.append(n) }}"
       "{% set ns.cur = n %}{% endfor %}{{ root|tojson }}" + tail,
       "over a bound"},
      {"raises", "{{ raise_exception('this template refuses every chat') }}" + tail, "refuses every chat", 400, "invalid_chat"},
  };
}

}  // namespace

// Every hostile template is refused by name and bound (one that raises, as
// templates do for chats they do not take, is the client's 400), the good model
// answers between them, and a template's verdict is kept: the second
// request to it is refused at once.
TEST(HostileText, TemplatesThatRecurseAllocateLoopOrNestAreA422AndTheServerGoesOn) {
  std::vector<std::string> args;
  const std::vector<Hostile> corpus = hostile_templates();
  for (const Hostile& h : corpus) {
    args.push_back("-m");
    args.push_back(model_with_template(h.name, h.jinja));
  }
  Served s(args);
  const json good = {{"model", "bpe"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}, {"temperature", 0}};
  ASSERT_EQ(s.post("/v1/chat/completions", good)->status, 200);
  for (const Hostile& h : corpus) {
    SCOPED_TRACE(h.name);
    json bad = good;
    bad["model"] = h.name;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s.post("/v1/chat/completions", bad);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, h.status) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["code"], h.code) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(h.says), std::string::npos) << r->body;
    // The template's time bound is 5 s; loading the model comes before it.
    std::printf("%-14s %5.2f s to its %d\n", h.name.c_str(), took, h.status);
    EXPECT_LT(took, 60) << "the bound did not hold";
    EXPECT_EQ(s.post("/v1/chat/completions", good)->status, 200) << "after " << h.name;
  }
  // A verdict on a template that fails the same way each time is kept.
  json again = good;
  again["model"] = "recurses";
  auto r = s.post("/v1/chat/completions", again);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422) << r->body;
  for (const Hostile& h : corpus) s.post("/v1/models/unload", {{"model", h.name}});
  s.expect_clean();
}

// A template whose recursion only some content reaches: no check of the
// template alone finds it; the chats that reach it are refused, and the
// others through the same template are answered.
TEST(HostileText, ATemplateThatRecursesOnlyForSomeContentRefusesThoseChatsAlone) {
  const std::string jinja =
      "{% macro f(x) %}{% if x == 'boom' %}{{ f(x) }}{% else %}{{ x }}{% endif %}{% endmacro %}"
      "{% for m in messages %}<|{{ m.role }}|>{{ f(m.content) }}{% endfor %}<|assistant|>";
  Served s({"-m", model_with_template("sometimes", jinja)});
  const json calm = {{"model", "sometimes"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}, {"temperature", 0}};
  EXPECT_EQ(s.post("/v1/chat/completions", calm)->status, 200);
  json boom = calm;
  boom["messages"] = json::array({user("boom")});
  auto r = s.post("/v1/chat/completions", boom);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422) << r->body;
  EXPECT_NE(r->body.find("nests its execution deeper than"), std::string::npos) << r->body;
  EXPECT_EQ(s.post("/v1/chat/completions", calm)->status, 200);
  s.post("/v1/models/unload", {{"model", "sometimes"}});
  s.expect_clean();
}

// A template that is slow without making much: each membership test
// searches 10 MB of text, a step that allocates nothing the engine counts,
// so its time bound (5 s) is what ends it, long before its steps or bytes
// would.
const char* kSlowTemplate =
    "{% set s = ('x' * 100000)|replace('x', 'xxxxxxxxxx') %}{% set s = s|replace('x', 'xxxxxxxxxx') %}{% for i in range(100) %}{% for j in range(100) %}{% if 'y' in s or 'y' in s or 'y' in s or 'y' in s or 'y' in s or 'y' in s or 'y' in s or 'y' in s or 'y' in s or 'y' in s %}z{% endif %}{% endfor %}{% endfor %}<|assistant|>";

TEST(HostileText, ATemplateThatRendersForeverEndsAtItsDeadline) {
  Served s({"-m", model_with_template("slow", kSlowTemplate), "--preload", "slow"});
  const json body = {{"model", "slow"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s.post("/v1/chat/completions", body);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422) << r->body;
  EXPECT_NE(r->body.find("took more than 5000 ms"), std::string::npos) << r->body;
  EXPECT_LT(took, 30);
  s.post("/v1/models/unload", {{"model", "slow"}});
  s.expect_clean();
}

// A client that leaves while its template renders stops the render: it is
// counted as gone, not answered with the 422 its deadline would give.
TEST(HostileText, AClientThatLeavesStopsItsTemplatesRender) {
  Served s({"-m", model_with_template("slow", kSlowTemplate), "--preload", "slow"});
  expect_leaving_stops_it(s, "/v1/chat/completions", {{"model", "slow"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}});
  s.post("/v1/models/unload", {{"model", "slow"}});
  s.expect_clean();
}

// A stream whose model is unloaded while its template renders has not
// started (a stream waits for its model and its prompt before its headers,
// --stream-hold): it is refused as a request not streamed is, a 503 to try
// again, never an error event after a 200.
TEST(HostileText, AStreamCutByAnUnloadWhileItsTemplateRendersIsA503BeforeItStarts) {
  Served s({"-m", model_with_template("slow", kSlowTemplate)});
  auto streaming = std::async(std::launch::async, [&] {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    const json body = {{"model", "slow"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}, {"stream", true}};
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  });
  // Held: its render (5 s to its deadline) runs now.
  ASSERT_TRUE(s.until([&] { return s.model("slow")["in_flight"] == 1; }, 60));
  ASSERT_EQ(s.post("/v1/models/unload", {{"model", "slow"}, {"mode", "cancel"}})->status, 200);
  auto streamed = streaming.get();
  expect_error(streamed, 503, "being unloaded");
  EXPECT_EQ(streamed->get_header_value("Retry-After"), "5");
  EXPECT_EQ(streamed->body.find("data:"), std::string::npos) << streamed->body;
  s.expect_clean();
}

namespace {

// A grammar of `n` one-word alternatives: each open at once, so that
// weighing one token checks every token of the vocabulary against each.
std::string many_alternatives(int n) {
  std::string g = "root ::= ";
  for (int i = 0; i < n; ++i) g += (i ? " | \"w" : "\"w") + std::to_string(i) + "x\"";
  return g;
}

}  // namespace

// A grammar too costly for the model's vocabulary is refused on the token
// where it went over its time (--grammar-token-time, 1 s here; 5 s by
// default), naming the field; this model answers after. 200 alternatives
// are well within it (their time a token is printed), 10,000 are not (4,000
// took 1-2.5 s a token on the bpe test model).
TEST(HostileText, AGrammarTooCostlyForTheVocabularyIsA400) {
  Served s({"--grammar-token-time", "1s"});
  const json within = {{"model", "bpe"}, {"prompt", "hi"}, {"max_tokens", 4}, {"grammar", many_alternatives(200)}};
  auto ok = s.post("/v1/completions", within);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  const json t = json::parse(ok->body)["timings"];
  std::printf("a grammar of 200 alternatives: %.2f s to the first token, %.2f s for the rest (%d tokens)\n",
              t["first_token_ms"].get<double>() / 1000, t["predicted_ms"].get<double>() / 1000, t["predicted_n"].get<int>());
  const json costly = {{"model", "bpe"}, {"prompt", "hi"}, {"max_tokens", 4}, {"grammar", many_alternatives(10000)}};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s.post("/v1/completions", costly);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("a grammar of 10,000 alternatives: %.1f s to its answer\n", took);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "grammar_too_costly") << r->body;
  EXPECT_EQ(e["param"], "grammar") << r->body;
  EXPECT_LT(took, 60);
  const json good = {{"model", "bpe"}, {"prompt", "hi"}, {"max_tokens", 2}, {"temperature", 0}};
  EXPECT_EQ(s.post("/v1/completions", good)->status, 200);
  s.post("/v1/models/unload", {{"model", "bpe"}});
  s.expect_clean();
}

// A grammar that no token of the vocabulary can go on (it asks for a NUL)
// is a 400 naming it, whatever the sampler would have picked from a
// vocabulary all refused: with GPT-NeoX's, MPT's or StarCoder's vocabulary,
// whose token 0 ends the text, greedy sampling handed the grammar that
// token and llama.cpp aborted the process. The server answers after.
TEST(HostileText, AGrammarThatNoTokenCanGoOnIsA400AndTheServerGoesOn) {
  const std::string neox = temp_path("neox.gguf");
  const Result made = run("make-test-model --out " + neox + " --vocab gpt-neox --embd 64 --layers 2 --type f16");
  ASSERT_EQ(made.status, 0) << made.out;
  Served s({"-m", neox + ":neox", "-m", bpe() + ":bpe"}, false);
  for (const char* model : {"neox", "bpe"}) {
    for (double temperature : {0.0, 1.0}) {
      const json body = {{"model", model}, {"prompt", "hi"}, {"max_tokens", 4}, {"temperature", temperature},
                         {"grammar", "root ::= \"\\x00\""}};
      auto r = s.post("/v1/completions", body);
      ASSERT_TRUE(r) << model << " " << temperature << ": the server did not answer";
      EXPECT_EQ(r->status, 400) << r->body;
      const json e = json::parse(r->body)["error"];
      EXPECT_EQ(e["code"], "grammar_dead_end") << r->body;
      EXPECT_EQ(e["param"], "grammar") << r->body;
    }
  }
  const json good = {{"model", "neox"}, {"prompt", "hi"}, {"max_tokens", 2}, {"temperature", 0}};
  EXPECT_EQ(s.post("/v1/completions", good)->status, 200);
  for (const char* m : {"neox", "bpe"}) s.post("/v1/models/unload", {{"model", m}});
  s.expect_clean();
}

// A client that leaves while its grammar weighs a token stops that step:
// the request is counted as gone, not as the error its time bound gives.
TEST(HostileText, AClientThatLeavesStopsItsGrammarsStep) {
  Served s({"--preload", "bpe"});
  const json costly = {{"model", "bpe"}, {"prompt", "hi"}, {"max_tokens", 4}, {"grammar", many_alternatives(10000)}};
  expect_leaving_stops_it(s, "/v1/completions", costly);
  s.post("/v1/models/unload", {{"model", "bpe"}});
  s.expect_clean();
}

// SIGTERM ends the server within its --shutdown-timeout whatever a request
// renders: after the timeout the request is cancelled, and its template's
// render stops at the engine's next look, long before its own 5 s deadline.
TEST(HostileText, SigtermEndsTheServerWithinItsShutdownTimeoutWhateverItRenders) {
  Served s({"-m", model_with_template("slow", kSlowTemplate), "--preload", "slow", "--shutdown-timeout", "1s"});
  const json body = {{"model", "slow"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}};
  std::unique_ptr<RawClient> c = post_in_flight(s, "/v1/chat/completions", body);
  // Holding its model, so rendering: a request that has not taken its
  // model yet when the shutdown begins is refused, not cancelled.
  ASSERT_TRUE(s.until([&] { return s.model("slow")["in_flight"] == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = s.stop();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("SIGTERM to exit while a template rendered: %.2f s (--shutdown-timeout 1s)\n", took);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_LT(took, 3.5) << "the render ran on to its own deadline";
  EXPECT_TRUE(c->read_until("cancelled", 5)) << c->received();
}

// Schemas and tool lists written to hurt: each is answered (a reply, or a
// 4xx that says why) within its bound, and the model answers after. A
// pattern llama.cpp's converter cannot follow once wrote the client's whole
// schema to stderr with each request (patches/llama.cpp/json-schema-warning-to-log.patch).
TEST(HostileText, HostileSchemasAndThousandsOfToolsAreAnsweredAndTheServerGoesOn) {
  const std::string qwen = temp_path("hostile-qwen.gguf");
  const Result made =
      run("make-test-model --out " + qwen + " --vocab bpe --embd 64 --layers 1 --type q8_0 --chat-template Qwen-Qwen2.5-7B-Instruct");
  ASSERT_EQ(made.status, 0) << made.err;
  Served s({"-m", qwen + ":qwen"});
  const json good = {{"model", "qwen"}, {"messages", json::array({user("hi")})}, {"max_tokens", 2}, {"temperature", 0}};
  auto schema = [&](const json& sch) {
    json b = good;
    b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", sch}}}};
    return b;
  };
  json nested = json::object();
  for (int i = 0; i < 10000; ++i) {
    json outer = {{"type", "object"}, {"properties", json::object()}};
    outer["properties"]["a"] = std::move(nested);
    nested = std::move(outer);
  }
  json tools = json::array();
  for (int i = 0; i < 2000; ++i) {
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "tool_" + std::to_string(i)},
                       {"description", "tool number " + std::to_string(i)},
                       {"parameters", {{"type", "object"}, {"properties", {{"x", {{"type", "string"}}}}}}}}}});
  }
  json many_tools = good;
  many_tools["tools"] = tools;
  json required = many_tools;
  required["tool_choice"] = "required";
  json thousand_tools = many_tools;
  thousand_tools["tools"].erase(thousand_tools["tools"].begin() + 1000, thousand_tools["tools"].end());
  std::string alternation;
  for (int i = 0; i < 20000; ++i) alternation += "(a|b)";
  struct Case {
    std::string name;
    json body;
  };
  const std::vector<Case> cases = {
      {"allOf that refers to itself", schema({{"$ref", "#/$defs/a"}, {"$defs", {{"a", {{"allOf", json::array({{{"$ref", "#/$defs/a"}}})}}}}}})},
      {"a property that refers to its object",
       schema({{"$ref", "#/$defs/a"}, {"$defs", {{"a", {{"type", "object"}, {"properties", {{"x", {{"$ref", "#/$defs/a"}}}}}}}}}})},
      {"nested 10,000 deep", schema(nested)},
      {"maxItems 1,000,000", schema({{"type", "array"}, {"items", {{"type", "integer"}}}, {"maxItems", 1000000}})},
      {"minItems 1,000,000", schema({{"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 1000000}})},
      {"a pattern of 20,000 alternations", schema({{"type", "string"}, {"pattern", alternation}})},
      {"2,000 tools", many_tools},
      {"2,000 tools, one required", required},
      {"1,000 tools", thousand_tools},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s.post("/v1/chat/completions", c.body);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r) << c.name;
    std::printf("%-40s %d in %.2f s\n", c.name.c_str(), r->status, took);
    EXPECT_LT(r->status, 500) << c.name << ": " << r->body.substr(0, 400);
    if (r->status >= 400) {
      const json e = json::parse(r->body, nullptr, false)["error"];
      EXPECT_FALSE(e["message"].get<std::string>().empty()) << c.name << ": " << r->body.substr(0, 400);
    }
    EXPECT_LT(took, 60) << c.name;
    EXPECT_EQ(s.post("/v1/chat/completions", good)->status, 200) << "after " << c.name;
  }
  s.post("/v1/models/unload", {{"model", "qwen"}});
  s.expect_clean();
}

// Alternations nested at the same position multiply the alternatives a
// grammar has open: twelve rules of three, 300 bytes, open 531,441, which
// llama.cpp's grammar kept comparing with each other for longer than a
// minute. Over 16,384 it is a 400 at once; ten levels (59,049) too, and
// six (729) are generated from.
TEST(HostileText, AGrammarWhoseAlternativesMultiplyIsRefusedAtOnce) {
  Served s;
  auto nested = [](int levels) {
    std::string g = "root ::= a0\n";
    for (int i = 0; i < levels; ++i) {
      const std::string next = "a" + std::to_string(i + 1);
      g += "a" + std::to_string(i) + " ::= " + next + " \"x\" | " + next + " \"y\" | " + next + " \"z\"\n";
    }
    return g + "a" + std::to_string(levels) + " ::= \"w\"\n";
  };
  for (int levels : {12, 10}) {
    const json body = {{"model", "bpe"}, {"prompt", "hi"}, {"max_tokens", 2}, {"grammar", nested(levels)}};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s.post("/v1/completions", body);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r) << levels;
    EXPECT_EQ(r->status, 400) << levels << ": " << r->body;
    EXPECT_NE(r->body.find("alternatives open at once"), std::string::npos) << r->body;
    EXPECT_LT(took, 10) << levels;
  }
  const json fine = {{"model", "bpe"}, {"prompt", "hi"}, {"max_tokens", 2}, {"grammar", nested(6)}};
  auto r = s.post("/v1/completions", fine);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  s.expect_clean();
}
