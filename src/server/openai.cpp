#include "server/openai.h"

#include "engine/build_info.h"
#include "engine/embed.h"
#include "engine/text_stream.h"
#include "server/chat_request.h"
#include "server/json_fields.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace reclaim::server {

using nlohmann::json;

void bad_request(const std::string& message, const std::string& code) {
  throw ApiException(ApiError{400, "invalid_request_error", code, message, 0});
}

void bad_field(const std::string& param, const std::string& message, const std::string& code) {
  throw ApiException(ApiError{400, "invalid_request_error", code, message, 0, param});
}

json error_json(const ApiError& e) {
  json error = {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  error.update(e.more);
  return {{"error", error}};
}

const char* openai_finish_reason(FinishReason f) {
  switch (f) {
    case FinishReason::eos:
    case FinishReason::stop: return "stop";
    case FinishReason::length:
    case FinishReason::context: return "length";
    // Cut short by an unload: OpenAI's clients know only stop, length,
    // tool_calls, content_filter and function_call, and "length" is the one
    // that says the reply is not whole.
    case FinishReason::cancelled: return "length";
  }
  return "stop";
}

// Beyond it a duration is a mistake, and beyond 2^63 ms a cast has no value.
constexpr double kMaxDurationSeconds = 366.0 * 24 * 3600;

int64_t parse_duration_ms(const json& v, const std::string& field) {
  if (v.is_number()) {
    const double s = v.get<double>();
    if (!std::isfinite(s) || s > kMaxDurationSeconds) {
      bad_field(field, "'" + field + "' must be a number of seconds up to a year, or -1");
    }
    return s < 0 ? -1 : static_cast<int64_t>(s * 1000);
  }
  if (!v.is_string()) bad_field(field, "'" + field + "' must be a duration such as \"5m\", a number of seconds, or -1");
  // Go's time.ParseDuration, as Ollama reads keep_alive: numbers with
  // units, one after another ("1h30m", "1.5h", "250ms"), a sign first; and a
  // bare number, which is seconds.
  const std::string t = v.get<std::string>();
  const std::string usage = "'" + field + "': '" + t + "' is not a duration (use e.g. 30s, 5m, 1h30m, -1)";
  size_t at = 0;
  bool negative = false;
  if (at < t.size() && (t[at] == '-' || t[at] == '+')) negative = t[at++] == '-';
  if (at == t.size()) bad_field(field, usage);
  double ms = 0;
  while (at < t.size()) {
    size_t used = 0;
    double n = 0;
    if (!(std::isdigit(static_cast<unsigned char>(t[at])) || t[at] == '.')) bad_field(field, usage);
    try {
      n = std::stod(t.substr(at), &used);
    } catch (...) {
      bad_field(field, usage);
    }
    at += used;
    size_t end = at;
    while (end < t.size() && std::isalpha(static_cast<unsigned char>(t[end]))) ++end;
    const std::string unit = t.substr(at, end - at);
    at = end;
    if (unit.empty() && (at < t.size() || ms != 0)) bad_field(field, usage);
    if (unit == "ns") {
      ms += n / 1e6;
    } else if (unit == "us") {
      ms += n / 1e3;
    } else if (unit == "ms") {
      ms += n;
    } else if (unit == "s" || unit.empty()) {
      ms += n * 1000;
    } else if (unit == "m") {
      ms += n * 60000;
    } else if (unit == "h") {
      ms += n * 3600000;
    } else {
      bad_field(field, "'" + field + "': unknown unit '" + unit + "' in '" + t + "' (use ms, s, m or h)");
    }
  }
  if (negative) return -1;
  if (!std::isfinite(ms) || ms > kMaxDurationSeconds * 1000) bad_field(field, "'" + field + "': '" + t + "' is longer than a year");
  return static_cast<int64_t>(ms);
}

void check_stops(const std::vector<std::string>& stops, const std::string& field) {
  if (stops.size() > kMaxStops) {
    bad_field(field, "'" + field + "' has " + std::to_string(stops.size()) + " stop strings, more than the limit of " +
                         std::to_string(kMaxStops));
  }
  for (const std::string& s : stops) {
    if (s.size() > kMaxStopBytes) {
      bad_field(field, "'" + field + "' has a stop string of " + std::to_string(s.size()) + " bytes, longer than the limit of " +
                           std::to_string(kMaxStopBytes));
    }
  }
}

void check_embed_inputs(size_t n, const std::string& field) {
  if (n > kMaxEmbedInputs) {
    bad_field(field, "'" + field + "' has " + std::to_string(n) + " inputs, more than the limit of " +
                         std::to_string(kMaxEmbedInputs) + " a request");
  }
}

namespace {

// OpenAI's shape: {"token id": bias from -100 to 100}. Whether the ids are
// in the model's vocabulary is known once it is (server/completion.cpp).
void parse_logit_bias(const json& lb, SamplingParams& sampling) {
  if (!lb.is_object()) bad_field("logit_bias", "'logit_bias' must be an object of token ids to numbers");
  for (const auto& [key, value] : lb.items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (...) {
      used = 0;
    }
    // In its one spelling: "01" and "+1" would be a second bias of token 1,
    // added to the first past the bound.
    if (used != key.size() || id < 0 || id > INT32_MAX || key != std::to_string(id)) {
      bad_field("logit_bias", "'logit_bias' has key '" + key + "', which is not a token id (digits, no sign or leading zero)");
    }
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
      bad_field("logit_bias", "'logit_bias' values must be numbers from -100 to 100");
    }
    sampling.logit_bias.push_back({static_cast<llama_token>(id), value.get<float>()});
  }
}

void parse_stop(const json& s, std::vector<std::string>& stop) {
  if (s.is_string()) {
    stop.push_back(s.get<std::string>());
  } else if (s.is_array() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); })) {
    for (const json& x : s) stop.push_back(x.get<std::string>());
  } else {
    bad_request("'stop' must be a string or an array of up to 4 strings");
  }
  check_stops(stop, "stop");
}

void parse_sampling(const json& j, bool chat, GenerateRequest& g) {
  // OpenAI's defaults: temperature 1, top_p 1, no other filter.
  g.sampling = SamplingParams{};
  g.sampling.temperature = 1.0f;
  g.sampling.top_p = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.min_p = 0.0f;
  g.max_tokens = chat ? -1 : 16;  // OpenAI: 16 for completions, unbounded for chat
  const char* max_field = j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (j.contains(max_field) && !j[max_field].is_null()) {
    const int64_t n = get_field<int64_t>(j, max_field, "an integer");
    if (n < 1 || n > (1 << 24)) bad_request(std::string("'") + max_field + "' must be between 1 and 16777216");
    g.max_tokens = static_cast<int32_t>(n);
  }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const double t = get_field<double>(j, "temperature", "a number");
    if (t < 0 || t > 2) bad_request("'temperature' must be between 0 and 2");
    g.sampling.temperature = static_cast<float>(t);
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const double p = get_field<double>(j, "top_p", "a number");
    if (!(p > 0 && p <= 1)) bad_request("'top_p' must be in (0, 1]");
    g.sampling.top_p = static_cast<float>(p);
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) g.sampling.top_k = get_field<int32_t>(j, "top_k", "an integer");
  if (j.contains("min_p") && !j["min_p"].is_null()) {
    const double p = get_field<double>(j, "min_p", "a number");
    if (!(p >= 0 && p <= 1)) bad_request("'min_p' must be in [0, 1]");
    g.sampling.min_p = static_cast<float>(p);
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    const int64_t s = get_field<int64_t>(j, "seed", "an integer");
    g.sampling.seed = static_cast<uint32_t>(s & 0xFFFFFFFF);
    if (g.sampling.seed == LLAMA_DEFAULT_SEED) g.sampling.seed = 0;
  }
  auto penalty = [&](const char* name, float& out) {
    if (!has_field(j, name)) return;
    const double v = get_field<double>(j, name, "a number");
    if (v < -2 || v > 2) bad_field(name, std::string("'") + name + "' must be between -2 and 2");
    out = static_cast<float>(v);
  };
  penalty("frequency_penalty", g.sampling.frequency_penalty);
  penalty("presence_penalty", g.sampling.presence_penalty);
  // llama-server's.
  if (has_field(j, "repeat_penalty")) {
    const double v = get_field<double>(j, "repeat_penalty", "a number");
    if (!(v > 0)) bad_field("repeat_penalty", "'repeat_penalty' must be > 0");
    g.sampling.repeat_penalty = static_cast<float>(v);
  }
  if (has_field(j, "repeat_last_n")) {
    const int32_t n = get_field<int32_t>(j, "repeat_last_n", "an integer");
    if (n < -1) bad_field("repeat_last_n", "'repeat_last_n' must be -1 (the whole context), 0 (off) or more");
    g.sampling.repeat_last_n = n;
  }
  if (has_field(j, "logit_bias")) parse_logit_bias(j["logit_bias"], g.sampling);
  if (has_field(j, "stop")) parse_stop(j["stop"], g.stop);
}

// Chat: "logprobs": true with "top_logprobs": 0..20. Completions (the
// legacy shape): "logprobs": the number of top tokens.
void parse_logprobs(const json& j, bool chat, GenerateRequest& g) {
  const std::string range = "an integer from 0 to " + std::to_string(kMaxTopLogprobs);
  auto count = [&](const char* name) {
    const int32_t n = get_field<int32_t>(j, name, range.c_str());
    if (n < 0 || n > kMaxTopLogprobs) bad_field(name, std::string("'") + name + "' must be " + range);
    return n;
  };
  if (!chat) {
    if (has_field(j, "logprobs")) g.logprobs = count("logprobs");
    return;
  }
  const bool on = has_field(j, "logprobs") && get_field<bool>(j, "logprobs", "true or false");
  if (has_field(j, "top_logprobs")) {
    const int32_t n = count("top_logprobs");
    if (!on) bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    g.logprobs = n;
  } else if (on) {
    g.logprobs = 0;
  }
}

}  // namespace

namespace {

// The offset of the first byte that is not well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), or npos. JSON text
// is UTF-8 (RFC 8259), and nlohmann's parser lets raw invalid bytes through
// inside strings, to fail only when a reply quotes them (a 500).
size_t invalid_utf8_at(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string::npos;
}

}  // namespace

json parse_object(const std::string& body) {
  if (const size_t at = invalid_utf8_at(body); at != std::string::npos) {
    bad_request("the request body is not valid UTF-8 (byte " + std::to_string(at) + ")");
  }
  // Nesting has a bound: writing a value out (dump) and the chat library's
  // readers recurse once a level, and a 9 MiB body of brackets nested 100,000
  // deep ended the process by its stack. OpenAI's own bodies, tool schemas
  // included, stay far below it.
  const json::parser_callback_t bounded = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) {
      bad_request("the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return true;
  };
  json j;
  try {
    j = json::parse(body, bounded);
  } catch (const json::parse_error& e) {
    bad_request(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad_request("the request body must be a JSON object");
  return j;
}

namespace {

// llama-server's prompt as an object: {"prompt_string", "multimodal_data"},
// its media in base64 for the markers in the text. No model here has a
// projector to read media with, so media are refused by name.
std::string object_prompt(const json& p) {
  if (!p.contains("prompt_string") || !p["prompt_string"].is_string()) {
    bad_field("prompt.prompt_string", "a prompt given as an object must have 'prompt_string', a string", "invalid_prompt");
  }
  if (has_field(p, "multimodal_data") && !(p["multimodal_data"].is_array() && p["multimodal_data"].empty())) {
    bad_field("prompt.multimodal_data", "'prompt.multimodal_data' holds media, and this model has no projector to read them with",
              "invalid_prompt");
  }
  return p["prompt_string"].get<std::string>();
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body, bool chat, const json& defaults) {
  return parse_completion_request(parse_object(body), chat, defaults);
}

CompletionRequest parse_completion_request(json j, bool chat, const json& defaults) {
  for (const auto& [key, value] : defaults.items()) {
    if (!j.contains(key) || j[key].is_null()) j[key] = value;
  }
  CompletionRequest r;
  r.chat = chat;
  if (!has_field(j, "model")) bad_request(kModelRequired, "model_required");
  r.model = get_field<std::string>(j, "model", "a string");
  if (chat) {
    parse_chat_fields(j, r);
  } else {
    if (!j.contains("prompt")) bad_request("'prompt' is required");
    const json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
    } else if (p.is_object() || (p.is_array() && p.size() == 1 && p[0].is_object())) {
      r.prompt = object_prompt(p.is_object() ? p : p[0]);
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();
    } else if (p.is_array() && !p.empty() &&
               std::all_of(p.begin(), p.end(), [](const json& t) { return t.is_number_integer(); })) {
      for (const json& t : p) {
        // Out of int32's range is out of every vocabulary; the engine names
        // the ids in range that are not in this model's.
        if (t.is_number_unsigned() ? t.get<uint64_t>() > INT32_MAX : t.get<int64_t>() < INT32_MIN) {
          bad_request("'prompt' has token id " + t.dump() + ", outside any vocabulary", "invalid_prompt");
        }
        r.generate.prompt_tokens.push_back(static_cast<llama_token>(t.get<int64_t>()));
      }
    } else {
      bad_request("'prompt' must be a string, an array of one string, or an array of token ids");
    }
  }
  parse_sampling(j, chat, r.generate);
  parse_output_format(j, r);
  parse_logprobs(j, chat, r.generate);
  if (j.contains("stream") && !j["stream"].is_null()) r.stream = get_field<bool>(j, "stream", "true or false");
  if (has_field(j, "n")) {
    const int64_t n = get_field<int64_t>(j, "n", "an integer");
    if (n < 1 || n > kMaxChoices) {
      bad_field("n", "'n' is " + std::to_string(n) + "; it must be 1 to " + std::to_string(kMaxChoices), "unsupported_n");
    }
    if (n > 1 && r.stream) {
      bad_field("n", "'n' above 1 is answered whole: send it with \"stream\": false, or n streamed requests",
                "unsupported_n");
    }
    r.choices = static_cast<int>(n);
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object()) bad_request("'stream_options' must be an object");
    const json& so = j["stream_options"];
    if (so.contains("include_usage") && !so["include_usage"].is_null()) {
      r.include_usage = get_field<bool>(so, "include_usage", "true or false");
    }
  }
  // llama-server's name and meaning: false neither reuses cached cells nor
  // leaves this request's.
  if (j.contains("cache_prompt") && !j["cache_prompt"].is_null()) {
    r.generate.cache_prompt = get_field<bool>(j, "cache_prompt", "true or false");
  }
  if (j.contains("keep_alive") && !j["keep_alive"].is_null()) r.keep_alive_ms = parse_duration_ms(j["keep_alive"], "keep_alive");
  if (has_field(j, "ignore_eos")) r.ignore_eos = get_field<bool>(j, "ignore_eos", "true or false");
  if (has_field(j, "post_sampling_probs")) {
    r.generate.post_sampling = get_field<bool>(j, "post_sampling_probs", "true or false");
  }
  if (has_field(j, "return_progress")) r.return_progress = get_field<bool>(j, "return_progress", "true or false");
  if (has_field(j, "timings_per_token")) r.timings_per_token = get_field<bool>(j, "timings_per_token", "true or false");
  if (has_field(j, "verbose")) r.verbose = get_field<bool>(j, "verbose", "true or false");
  return r;
}

ControlRequest parse_control_request(const std::string& body, bool unload) {
  const json j = parse_object(body);
  ControlRequest c;
  if (!j.contains("model")) bad_request("'model' is required", "model_required");
  c.model = get_field<std::string>(j, "model", "a string");
  if (!unload && j.contains("pin") && !j["pin"].is_null()) c.pin = get_field<bool>(j, "pin", "true or false");
  if (unload && j.contains("mode") && !j["mode"].is_null()) {
    const std::string mode = get_field<std::string>(j, "mode", "\"drain\" or \"cancel\"");
    if (mode != "drain" && mode != "cancel") bad_request("'mode' must be \"drain\" or \"cancel\"");
    c.cancel = mode == "cancel";
  }
  if (unload && j.contains("timeout") && !j["timeout"].is_null()) c.timeout_ms = parse_duration_ms(j["timeout"], "timeout");
  return c;
}

ControlRequest parse_pin_request(const std::string& body) {
  const json j = parse_object(body);
  ControlRequest c;
  if (!j.contains("model")) bad_request("'model' is required", "model_required");
  c.model = get_field<std::string>(j, "model", "a string");
  c.pin = !j.contains("pin") || j["pin"].is_null() || get_field<bool>(j, "pin", "true or false");
  return c;
}

json usage_json(const GenerateResult& r) {
  return {{"prompt_tokens", r.timings.prompt_tokens},
          {"completion_tokens", r.timings.generated_tokens},
          {"total_tokens", r.timings.prompt_tokens + r.timings.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.timings.cached_tokens}}}};
}

json completion_json(const CompletionRequest& req, const GenerateResult& r, const json& message, const char* finish,
                     const std::string& id, int64_t created, const json& logprobs) {
  json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", logprobs}};
  if (req.chat) {
    choice["message"] = message;
  } else {
    choice["text"] = r.text;
  }
  return {{"id", id},
          {"object", req.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", req.model},
          {"system_fingerprint", llama_build()},
          {"choices", json::array({choice})},
          {"usage", usage_json(r)},
          {"timings", timings_json(r)}};
}

json timings_json(const GenerateResult& r) { return timings_json(r.timings); }

json timings_json(const PromptProgress& p) {
  Timings t;
  t.prompt_tokens = p.processed;
  t.cached_tokens = p.cached;
  t.prompt_ms = p.ms;
  return timings_json(t);
}

json progress_json(const PromptProgress& p) {
  return {{"total", p.total}, {"cache", p.cached}, {"processed", p.processed}, {"time_ms", static_cast<int64_t>(p.ms)}};
}

json timings_json(const Timings& t) {
  const auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  const int64_t decoded = t.prompt_tokens - t.cached_tokens;
  json out = {{"cache_n", t.cached_tokens},
          {"prompt_n", decoded},
          {"prompt_ms", t.prompt_ms},
          {"prompt_per_token_ms", per_token(t.prompt_ms, decoded)},
          {"prompt_per_second", t.prompt_per_second()},
          {"predicted_n", t.generated_tokens},
          {"predicted_ms", t.generate_ms},
          {"predicted_per_token_ms", per_token(t.generate_ms, t.generate_decodes)},
          {"predicted_per_second", t.generate_per_second()},
          {"first_token_ms", t.first_token_ms}};
  // As llama-server: only where speculation guessed.
  if (t.draft_tokens > 0) {
    out["draft_n"] = t.draft_tokens;
    out["draft_n_accepted"] = t.draft_accepted;
  }
  return out;
}

json chunk_json(const CompletionRequest& req, const json& delta_or_text, const char* finish, const std::string& id,
                int64_t created, const json& logprobs) {
  json choice = {{"index", 0}, {"finish_reason", finish ? json(finish) : json(nullptr)}, {"logprobs", logprobs}};
  choice[req.chat ? "delta" : "text"] = delta_or_text;
  return {{"id", id},
          {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", req.model},
          {"system_fingerprint", llama_build()},
          {"choices", json::array({choice})}};
}

}  // namespace reclaim::server
