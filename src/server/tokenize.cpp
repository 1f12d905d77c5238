// llama-server's /tokenize and /detokenize, on the request path every
// endpoint takes: the body's model (or the default), held while its
// vocabulary is read.
#include <httplib.h>

#include <algorithm>

#include "engine/generate.h"
#include "engine/text_stream.h"
#include "server/json_fields.h"
#include "server/mixed_prompt.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// Tokens of one request at most, either way: a 32 MiB body can hold tens of
// millions of one-byte tokens, and the answer grows with their count.
constexpr size_t kMaxTokens = size_t{1} << 20;

void check_count(size_t n, const char* field) {
  if (n > kMaxTokens) {
    bad_field(field, "'" + std::string(field) + "' is " + std::to_string(n) + " tokens, more than the limit of " +
                         std::to_string(kMaxTokens) + " a request");
  }
}

// A piece that is not whole UTF-8 (a byte of a multi-byte character) is
// its bytes, as llama-server gives it.
json piece_json(const std::string& piece) {
  if (valid_utf8(piece) == piece) return piece;
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

void Server::tokenize_text(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const json body = openai_body(req);
    if (!has_field(body, "model")) bad_request(kModelRequired, "model_required");
    const std::string model = get_field<std::string>(body, "model", "a string");
    const bool add_special = has_field(body, "add_special") && get_field<bool>(body, "add_special", "true or false");
    const bool parse_special = !has_field(body, "parse_special") || get_field<bool>(body, "parse_special", "true or false");
    const bool with_pieces = has_field(body, "with_pieces") && get_field<bool>(body, "with_pieces", "true or false");
    settings_of(model);  // an unknown model is a 404 here, as at the lease
    run->hold(model, std::nullopt);
    const llama_vocab* vocab = run->model().vocab();
    std::vector<llama_token> ids;
    if (has_field(body, "content")) ids = mixed_prompt_tokens(vocab, body["content"], "content", add_special, parse_special);
    check_count(ids.size(), "content");
    // Written as text as it goes: as JSON objects, each token's id and piece
    // would be a map of their own on the heap until the answer is written.
    std::string out = "{\"tokens\":[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ',';
      const std::string id = std::to_string(ids[i]);
      out += with_pieces ? "{\"id\":" + id + ",\"piece\":" + piece_json(token_piece(vocab, ids[i], true)).dump() + "}" : id;
    }
    out += "]}";
    run->succeed();
    res.set_content(out, "application/json");
  });
}

void Server::detokenize_tokens(const httplib::Request& req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const json body = openai_body(req);
    if (!has_field(body, "model")) bad_request(kModelRequired, "model_required");
    const std::string model = get_field<std::string>(body, "model", "a string");
    std::vector<llama_token> ids;
    if (has_field(body, "tokens")) {
      if (!body["tokens"].is_array()) bad_field("tokens", "'tokens' must be an array of token ids");
      check_count(body["tokens"].size(), "tokens");
      for (const json& t : body["tokens"]) ids.push_back(token_id(t, "tokens"));
    }
    settings_of(model);
    run->hold(model, std::nullopt);
    const llama_vocab* vocab = run->model().vocab();
    check_token_ids(vocab, ids);
    std::string text;
    for (llama_token t : ids) text += token_piece(vocab, t, true);
    run->succeed();
    // Ids may end inside a character: what is not whole UTF-8 is U+FFFD.
    res.set_content(json{{"content", valid_utf8(text)}}.dump(), "application/json");
  });
}

}  // namespace reclaim::server
