// llama-server's resumable stream routes (server/stream_sessions.h says
// what a session is). The conversation id travels in the query string: it
// may hold a model's name, slashes and all ("ID::ORG/REPO:QUANT").
#include <httplib.h>

#include <charconv>

#include "server/http_errors.h"
#include "server/json_fields.h"
#include "server/server.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

std::string conversation_of(const httplib::Request& req) {
  return required_query(req, "conv_id", "the stream's conversation (its X-Conversation-Id)");
}

}  // namespace

std::shared_ptr<StreamSession> Server::open_stream(const httplib::Request& req, RequestRun& run) {
  const std::string id = req.get_header_value("X-Conversation-Id");
  if (id.empty()) return nullptr;
  if (id.size() > 256) bad_field("X-Conversation-Id", "the X-Conversation-Id header must be at most 256 bytes");
  std::shared_ptr<StreamSession> s = sessions_->open(id);
  if (!s) {
    throw ApiException(ApiError{429, "rate_limit_error", "too_many_streams",
                                "already " + std::to_string(StreamSessions::kMaxSessions) +
                                    " resumable streams are running; try again when one ends",
                                5});
  }
  // Wanted as long as its session is, whatever its connection does.
  run.set_client_here([s] { return !s->cancelled(); });
  return s;
}

void Server::stream_resume(const httplib::Request& req, httplib::Response& res) {
  const std::string id = conversation_of(req);
  size_t from = 0;
  if (req.has_param("from")) {
    const std::string v = req.get_param_value("from");
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), from);
    if (ec != std::errc() || end != v.data() + v.size()) bad_field("from", "'from' must be a byte offset into the stream, 0 or more");
  }
  std::shared_ptr<StreamSession> s = sessions_->find(id);
  if (!s) {
    throw ApiException(ApiError{404, "invalid_request_error", "stream_not_found",
                                "no stream of conversation '" + id + "' (stopped, never started, or finished over " +
                                    std::to_string(StreamSessions::kTtl.count()) + " s ago)",
                                0});
  }
  // Its request still waits for its model: nothing to send yet.
  if (!s->started()) {
    throw ApiException(ApiError{503, "server_error", "stream_not_started", "the stream's model is not ready yet; retry", 1});
  }
  if (const size_t total = s->total(); from > total) {
    bad_field("from", "'from' is byte " + std::to_string(from) + ", past the " + std::to_string(total) +
                          " bytes the stream has sent so far");
  }
  if (const size_t first = s->first_kept(); from < first) {
    throw ApiException(ApiError{410, "invalid_request_error", "stream_offset_lost",
                                "byte " + std::to_string(from) + " is no longer kept: a stream keeps at least its last " +
                                    std::to_string(StreamSessions::kKeptBytes) + " bytes, now from byte " +
                                    std::to_string(first),
                                0});
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", [this, s, offset = from](size_t, httplib::DataSink& sink) mutable {
    std::string out;
    while (!stopping_.load()) {
      out.clear();
      const StreamSession::Read r = s->read(offset, out, std::chrono::milliseconds(200));
      if (r == StreamSession::Read::lost) return false;  // fell behind the kept bytes: the reader starts again
      if (!out.empty() && !sink.write(out.data(), out.size())) return false;
      if (r == StreamSession::Read::done) {
        sink.done();
        return true;
      }
      if (!sink.is_writable()) return false;
    }
    return false;
  });
}

void Server::stream_stop(const httplib::Request& req, httplib::Response& res) {
  sessions_->forget(conversation_of(req));  // idempotent: gone already is stopped
  res.status = 204;
}

void Server::stream_lookup(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_object(req.body);
  std::vector<std::string> ids;
  if (has_field(body, "conversation_ids")) {
    const json& list = body["conversation_ids"];
    if (!list.is_array() || list.size() > StreamSessions::kMaxSessions * 4) {
      bad_field("conversation_ids", "'conversation_ids' must be an array of at most " +
                                        std::to_string(StreamSessions::kMaxSessions * 4) + " conversation ids");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) bad_field(indexed("conversation_ids", i), "each conversation id must be a string");
      if (!list[i].get<std::string>().empty()) ids.push_back(list[i]);
    }
  }
  json out = json::array();
  for (const auto& s : sessions_->lookup(ids)) {
    out.push_back({{"conversation_id", s->id()},
                   {"is_done", s->done()},
                   {"total_bytes", s->total()},
                   {"started_at", s->started_at()},
                   {"completed_at", s->finished_at()}});
  }
  res.set_content(out.dump(), "application/json");
}

}  // namespace reclaim::server
