// libFuzzer target: the text one request makes the server process, in this
// process, with ASan and leak detection: a chat template (the input's own
// text, or one of llama.cpp's real templates by name), the request's
// messages, tools, tool choice and JSON schema, rendered under the bounds
// the server uses (engine/chat.h); the grammar that render made and a
// client's own GBNF, checked and parsed against a vocabulary; and a model's
// reply read back by the template's parser. A crash here is one the bounds
// and checks do not contain, in the server's own process.
//
// The input is up to four parts split by the byte 0x1e:
//   template | request JSON | GBNF | reply text
// A template part "@NAME" is llama.cpp's models/templates/NAME.jinja. The
// request JSON is {"messages": [...], "tools": [{"name", "description",
// "parameters"}], "tool_choice": "auto"|"none"|"required", "json_schema": {...}}.
//
// scripts/fuzz builds it with the same llama.cpp build as fuzz-gguf and runs
// both; its seeds are written there.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "engine/chat.h"
#include "engine/grammar_limits.h"
#include "engine/model.h"
#include "engine/llama_runtime.h"
#include "engine/sampling.h"
#include "engine/test_model.h"

#ifndef RECLAIM_FUZZ_TEMPLATES
#error "RECLAIM_FUZZ_TEMPLATES must name llama.cpp's models/templates folder"
#endif

namespace {

using nlohmann::json;

reclaim::Model* g_model = nullptr;

std::vector<std::string> split(const std::string& s, char sep, size_t most) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (parts.size() + 1 < most) {
    const size_t next = s.find(sep, at);
    if (next == std::string::npos) break;
    parts.push_back(s.substr(at, next - at));
    at = next + 1;
  }
  parts.push_back(s.substr(at));
  parts.resize(most);
  return parts;
}

// A real template by name, or the text itself.
std::string template_of(const std::string& part) {
  if (part.size() < 2 || part[0] != '@' || part.size() > 128 || part.find('/') != std::string::npos) return part;
  std::ifstream f(std::string(RECLAIM_FUZZ_TEMPLATES) + "/" + part.substr(1) + ".jinja");
  if (!f) return part;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// How deep JSON text nests: the server refuses bodies deeper than 128.
int nesting(const std::string& s) {
  int d = 0, most = 0;
  for (char c : s) {
    if (c == '[' || c == '{') most = std::max(most, ++d);
    if ((c == ']' || c == '}') && d > 0) --d;
  }
  return most;
}

reclaim::ChatRequest request_of(const std::string& part) {
  reclaim::ChatRequest r;
  r.messages = R"([{"role":"user","content":"hi"}])";
  if (nesting(part) > 128) return r;
  const json j = json::parse(part, nullptr, false);
  if (!j.is_object()) return r;
  if (j.contains("messages")) r.messages = j["messages"].dump();
  if (j.contains("tools") && j["tools"].is_array()) {
    for (const json& t : j["tools"]) {
      if (!t.is_object()) continue;
      reclaim::ChatTool tool;
      if (t.contains("name") && t["name"].is_string()) tool.name = t["name"];
      if (t.contains("description") && t["description"].is_string()) tool.description = t["description"];
      tool.parameters = t.contains("parameters") ? t["parameters"].dump() : "{}";
      r.tools.push_back(std::move(tool));
    }
  }
  if (j.contains("tool_choice") && j["tool_choice"].is_string()) {
    const std::string c = j["tool_choice"];
    r.tool_choice = c == "none" ? reclaim::ToolChoice::none : c == "required" ? reclaim::ToolChoice::required : reclaim::ToolChoice::automatic;
  }
  if (j.contains("json_schema")) r.json_schema = j["json_schema"].dump();
  return r;
}

// The reply as the server hands it to the reader: valid UTF-8 (the text
// stream holds back a token's partial characters), in pieces that end on a
// character's boundary. Invalid bytes are dropped; at most 4 KiB, since
// each piece has the reader parse all it has so far.
std::vector<std::string> reply_pieces(const std::string& raw) {
  std::vector<std::string> pieces;
  std::string piece;
  const size_t n = std::min<size_t>(raw.size(), 4096);
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(raw[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(raw[i + k]) & 0xc0) == 0x80;
    if (!ok) {
      ++i;
      continue;
    }
    piece.append(raw, i, len);
    i += len;
    if (piece.size() >= 7) pieces.push_back(std::move(piece)), piece.clear();
  }
  if (!piece.empty()) pieces.push_back(piece);
  return pieces;
}

// What the server does with a grammar before it decodes (server/completion.cpp).
void check_grammar(const std::string& gbnf) {
  if (gbnf.empty()) return;
  try {
    reclaim::check_grammar_limits(gbnf);
    (void)reclaim::grammar_parses(g_model->vocab(), gbnf);
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // For the life of the process, as in the server.
  static reclaim::Runtime* runtime = new reclaim::Runtime();
  (void)runtime;
  reclaim::quiet_common_log();
  char dir[] = "/tmp/reclaim-fuzz-request.XXXXXX";
  if (!::mkdtemp(dir)) std::abort();
  const std::string path = std::string(dir) + "/bpe.gguf";
  reclaim::TestModelSpec spec;
  spec.vocab = "bpe";
  spec.n_embd = 64;
  spec.n_layer = 1;
  reclaim::make_test_model(spec, path);
  reclaim::ModelLoad load;
  load.path = path;
  g_model = new reclaim::Model(load);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split(std::string(reinterpret_cast<const char*>(data), size), '\x1e', 4);
  reclaim::TemplateBounds bounds;
  bounds.time = std::chrono::milliseconds(2000);
  check_grammar(parts[2]);
  try {
    reclaim::ChatTemplate t(*g_model, template_of(parts[0]), bounds);
    reclaim::ChatRender r = t.render(request_of(parts[1]), bounds);
    check_grammar(r.grammar.gbnf);
    // The reply, streamed in pieces as tokens bring it, then whole.
    for (const std::string& piece : reply_pieces(parts[3])) r.reader.push(piece);
    (void)r.reader.finish();
  } catch (const std::exception&) {
    // A refusal is an answer; only a crash, a leak or a hang is a finding.
  }
  return 0;
}
