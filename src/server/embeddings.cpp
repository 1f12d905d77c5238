// POST /v1/embeddings: OpenAI's request (input a string, strings, token ids
// or lists of them; encoding_format float or base64) on the same registry,
// line and keep-alive as a completion. The embedding context is the
// request's own (engine/embed.h), released when the request ends.
#include <httplib.h>
#include <openssl/evp.h>

#include "engine/embed.h"
#include "engine/generate.h"
#include "server/connections.h"
#include "server/json_fields.h"
#include "server/mixed_prompt.h"
#include "server/openai.h"
#include "server/http_errors.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

struct EmbeddingsRequest {
  std::string model;
  json input;  // checked: a string, or a non-empty array of strings, token ids, or arrays of them
  bool base64 = false;
  std::optional<int64_t> keep_alive_ms;
};

EmbeddingsRequest parse_embeddings_request(const json& j) {
  EmbeddingsRequest r;
  if (!has_field(j, "model")) bad_field("model", kModelRequired, "model_required");
  r.model = get_field<std::string>(j, "model", "a string");
  if (!has_field(j, "input")) bad_field("input", "'input' is required");
  const json& in = j["input"];
  // One prompt, or a list of them (each a string, or token ids with or
  // without strings among them): llama-server's shapes, OpenAI's among them.
  auto prompt = [](const json& p) {
    return p.is_string() || (p.is_array() && !p.empty() &&
                             std::all_of(p.begin(), p.end(), [](const json& e) { return e.is_string() || e.is_number_integer(); }));
  };
  const bool ok = is_one_prompt(in) || (in.is_array() && !in.empty() && std::all_of(in.begin(), in.end(), prompt));
  if (!ok) {
    bad_field("input",
              "'input' must be a string, an array of token ids (strings may be among them), or an array of those");
  }
  if (in.is_array() && !is_one_prompt(in)) check_embed_inputs(in.size(), "input");
  r.input = in;
  if (has_field(j, "encoding_format")) {
    const std::string f = get_field<std::string>(j, "encoding_format", "\"float\" or \"base64\"");
    if (f != "float" && f != "base64") bad_field("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = f == "base64";
  }
  if (has_field(j, "dimensions")) {
    bad_field("dimensions", "'dimensions' cannot be set: a model's embeddings have its own width", "unsupported_dimensions");
  }
  if (has_field(j, "keep_alive")) r.keep_alive_ms = parse_duration_ms(j["keep_alive"], "keep_alive");
  return r;
}

// The inputs as token lists: strings tokenized as a completion's prompt is.
std::vector<std::vector<llama_token>> input_tokens(const json& in, const llama_vocab* vocab) {
  std::vector<std::vector<llama_token>> out;
  if (is_one_prompt(in)) {
    out.push_back(mixed_prompt_tokens(vocab, in, "input", true, true));
  } else {
    for (const json& p : in) out.push_back(mixed_prompt_tokens(vocab, p, "input", true, true));
  }
  return out;
}

bool input_has_text(const json& in) {
  if (in.is_string()) return true;
  return std::any_of(in.begin(), in.end(), [](const json& e) { return e.is_string() || (e.is_array() && input_has_text(e)); });
}

// OpenAI's base64 form: the float32 values' little-endian bytes.
std::string base64_floats(const std::vector<float>& v) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out(4 * ((n + 2) / 3), '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes, static_cast<int>(n));
  out.resize(static_cast<size_t>(written));
  return out;
}

}  // namespace

EmbedResult Server::embed_input(RequestRun& run, const std::string& model_name, const json& input,
                                std::optional<int64_t> keep_alive_ms, bool truncate) {
  settings_of(model_name);  // an unknown model is a 404 here, as at the lease
  run.hold(model_name, requested_keep_alive(keep_alive_ms));
  Model& model = run.model();
  if (!has_tokenizer(model.vocab()) && input_has_text(input)) {
    bad_field("input", "model '" + model_name + "' has no tokenizer: give 'input' as token ids", "model_has_no_tokenizer");
  }
  std::vector<std::vector<llama_token>> inputs = input_tokens(input, model.vocab());
  if (const size_t limit = pooled_input_limit(model); truncate && limit > 0) {
    // Ollama's default: an input longer than the model's context (its
    // num_ctx, here a sequence of its batch) is cut to it.
    for (std::vector<llama_token>& t : inputs) {
      if (t.size() > limit) t.resize(limit);
    }
  }
  EmbedResult r = embed(model, inputs, &run.cancel(), [&run] { run.tick(); });
  switch (run.finish(r)) {
    case RunEnd::client_gone: throw ClientGone("the client left while its embeddings were computed");
    case RunEnd::cancelled:
      throw ApiException(ApiError{503, "server_error", "cancelled", "the request was cancelled: its model is being unloaded", 5});
    default: return r;
  }
}

void Server::embeddings(const httplib::Request& http_req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) { answer_embeddings(*run, http_req, res); });
}

void Server::answer_embeddings(RequestRun& run, const httplib::Request& http_req, httplib::Response& res) {
  const EmbeddingsRequest req = parse_embeddings_request(openai_body(http_req));
  const EmbedResult r = embed_input(run, req.model, req.input, req.keep_alive_ms, false);
  json data = json::array();
  for (size_t i = 0; i < r.vectors.size(); ++i) {
    data.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", req.base64 ? json(base64_floats(r.vectors[i])) : json(r.vectors[i])}});
  }
  res.set_content(json{{"object", "list"},
                       {"data", data},
                       {"model", req.model},
                       {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}}
                      .dump(),
                  "application/json");
}

}  // namespace reclaim::server
