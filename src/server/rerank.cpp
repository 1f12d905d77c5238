// POST /rerank (and /v1/rerank, /reranking, /v1/reranking, as llama-server
// serves it): how relevant each document is to a query, by a reranking
// model, in Jina's and Cohere's shape, or in Hugging Face TEI's when the
// documents come as `texts`. Each (query, document) pair is a pooled decode in
// the request's own context (engine/rerank.h), on the registry, line and
// keep-alive a completion takes.
#include <httplib.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>

#include "engine/generate.h"
#include "engine/rerank.h"
#include "server/connections.h"
#include "server/http_errors.h"
#include "server/json_fields.h"
#include "server/openai.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// The tokens of all of a request's pairs together, at most: each pair is
// decoded on its own, the query in each.
constexpr size_t kMaxRerankTokens = size_t{1} << 20;

// Cohere's limit on one request's documents: each is a decode of its own,
// and a client with more sends them in several requests.
constexpr size_t kMaxDocuments = 1000;

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<std::string> documents;
  bool tei = false;  // `texts` given: TEI's shape, a bare array of {index, score}
  size_t top_n = 0;
  bool return_text = false;       // TEI's: each result with its text
  bool return_documents = false;  // Jina's and Cohere's: each with {"document": {"text": ...}}
  std::optional<int64_t> keep_alive_ms;
};

RerankRequest parse_rerank_request(const json& j) {
  RerankRequest r;
  if (!has_field(j, "model")) bad_field("model", kModelRequired, "model_required");
  r.model = get_field<std::string>(j, "model", "a string");
  if (!has_field(j, "query")) bad_field("query", "'query' is required");
  r.query = get_field<std::string>(j, "query", "a string");
  r.tei = !j.contains("documents") && j.contains("texts");
  const char* field = r.tei ? "texts" : "documents";
  const json docs = j.contains(field) ? j[field] : json();
  const std::string what = std::string("'") + field + "' must be a non-empty array of strings";
  if (!docs.is_array() || docs.empty()) bad_field(field, what);
  if (docs.size() > kMaxDocuments) {
    bad_field(field, std::string("'") + field + "' has " + std::to_string(docs.size()) + " documents; at most " +
                         std::to_string(kMaxDocuments) + " are ranked in one request");
  }
  for (size_t i = 0; i < docs.size(); ++i) {
    // Cohere's documents may be {"text": ...} objects.
    const json& d = docs[i];
    if (d.is_string()) r.documents.push_back(d.get<std::string>());
    else if (!r.tei && d.is_object()) r.documents.push_back(string_at(d, "text", indexed(field, i)).get<std::string>());
    else bad_field(indexed(field, i), "'" + indexed(field, i) + (r.tei ? "' must be a string" : "' must be a string or {\"text\": string}"));
  }
  r.top_n = r.documents.size();
  if (has_field(j, "top_n")) {
    const int64_t n = get_field<int64_t>(j, "top_n", "a positive integer");
    if (n < 1) bad_field("top_n", "'top_n' must be a positive integer");
    r.top_n = std::min(r.top_n, static_cast<size_t>(n));
  }
  if (has_field(j, "return_text")) r.return_text = get_field<bool>(j, "return_text", "true or false");
  if (has_field(j, "return_documents")) r.return_documents = get_field<bool>(j, "return_documents", "true or false");
  if (has_field(j, "keep_alive")) r.keep_alive_ms = parse_duration_ms(j["keep_alive"], "keep_alive");
  return r;
}

}  // namespace

void Server::rerank_documents(const httplib::Request& http_req, httplib::Response& res) {
  in_run([&](std::shared_ptr<RequestRun> run) {
    const RerankRequest req = parse_rerank_request(openai_body(http_req));
    settings_of(req.model);  // an unknown model is a 404 here, as at the lease
    run->hold(req.model, requested_keep_alive(req.keep_alive_ms));
    Model& model = run->model();
    if (!is_reranker(model)) {
      bad_field("model", "model '" + req.model + "' is not a reranker (its pooling is not rank): rerank with one that is",
                "rerank_not_supported");
    }
    // The query alone over the model's context is refused before it is paired
    // with a thousand documents (a pair is the query's length and more).
    check_pooled_length(model, tokenize(model.vocab(), req.query, false, false).size(), "the query");
    // Each pair is decoded on its own: the query's tokens count once a
    // document, which a body does not bound.
    std::vector<std::vector<llama_token>> pairs;
    size_t tokens = 0;
    for (const std::string& d : req.documents) {
      run->tick();
      if (run->client_gone()) throw ClientGone("the client left while its documents were read");
      pairs.push_back(rerank_tokens(model, req.query, d));
      tokens += pairs.back().size();
      if (tokens > kMaxRerankTokens) {
        bad_field("documents", "the query paired with each document is over " + std::to_string(kMaxRerankTokens) +
                                   " tokens in all (by document " + std::to_string(pairs.size()) +
                                   " of " + std::to_string(req.documents.size()) + "), the most a request may decode: fewer "
                                   "documents, or a shorter query");
      }
    }
    const RerankResult r = rerank(model, pairs, &run->cancel(), [&run] { run->tick(); });
    switch (run->finish(r)) {
      case RunEnd::client_gone: throw ClientGone("the client left while its documents were ranked");
      case RunEnd::cancelled:
        throw ApiException(ApiError{503, "server_error", "cancelled", "the request was cancelled: its model is being unloaded", 5});
      default: break;
    }
    // Best first; equal scores keep the order given, and a score that is not
    // a number (a damaged model's) goes last.
    std::vector<size_t> order(r.scores.size());
    std::iota(order.begin(), order.end(), size_t{0});
    auto key = [&r](size_t i) { return std::isnan(r.scores[i]) ? -INFINITY : r.scores[i]; };
    std::stable_sort(order.begin(), order.end(), [&key](size_t a, size_t b) { return key(a) > key(b); });
    order.resize(req.top_n);
    json results = json::array();
    for (size_t i : order) {
      json e{{"index", i}, {req.tei ? "score" : "relevance_score", r.scores[i]}};
      if (req.tei && req.return_text) e["text"] = req.documents[i];
      if (!req.tei && req.return_documents) e["document"] = {{"text", req.documents[i]}};
      results.push_back(std::move(e));
    }
    if (req.tei) {
      res.set_content(results.dump(), "application/json");
      return;
    }
    res.set_content(json{{"model", req.model},
                         {"object", "list"},
                         {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}},
                         {"results", results}}
                        .dump(),
                    "application/json");
  });
}

}  // namespace reclaim::server
