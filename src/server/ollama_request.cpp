// Ollama's request bodies read into OpenAI's fields, which the OpenAI side's
// parser then checks (one reading, one set of errors), with what only
// Ollama has kept beside: its defaults, its stops, `think`, and /api/generate's
// raw prompts.
#include <algorithm>

#include "server/image_parts.h"
#include "server/json_fields.h"
#include "server/ollama.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

// Ollama's own defaults (api.DefaultOptions), where OpenAI's differ.
const json& ollama_defaults() {
  static const json d = {{"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.9}, {"repeat_penalty", 1.1}, {"repeat_last_n", 64}};
  return d;
}

// Options that map to a field of the same meaning; the rest of Ollama's
// (num_ctx, num_gpu, num_thread, mirostat...) are the model's settings in
// reclaim (--config) or not offered, and are ignored, as Ollama ignores
// options it does not know.
void take_options(const json& j, OllamaRequest& o) {
  if (!has_field(j, "options")) return;
  const json& opt = j["options"];
  if (!opt.is_object()) bad_field("options", "'options' must be an object");
  for (const char* name : {"temperature", "top_p", "top_k", "min_p", "seed", "repeat_penalty", "repeat_last_n",
                           "presence_penalty", "frequency_penalty"}) {
    if (has_field(opt, name)) o.openai[name] = opt[name];
  }
  if (has_field(opt, "num_predict")) {
    const int64_t n = get_field<int64_t>(opt, "num_predict", "an integer");
    // -1 (and 0): no limit; -2: until the context is full, which is the limit.
    if (n > 0) o.openai["max_tokens"] = n;
    o.predict_given = true;
  }
  if (has_field(opt, "stop")) {
    const json& s = opt["stop"];
    if (!s.is_array() || !std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); })) {
      bad_field("options.stop", "'options.stop' must be an array of strings");
    }
    for (const json& x : s) {
      if (!x.get<std::string>().empty()) o.stops.push_back(x.get<std::string>());
    }
    check_stops(o.stops, "options.stop");
  }
}

// "json", or a JSON schema.
void take_format(const json& j, OllamaRequest& o) {
  if (!has_field(j, "format")) return;
  const json& f = j["format"];
  if (f.is_string() && f.get<std::string>().empty()) return;
  if (f.is_string() && f.get<std::string>() == "json") {
    o.openai["response_format"] = {{"type", "json_object"}};
  } else if (f.is_object()) {
    o.openai["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "format"}, {"schema", f}}}};
  } else {
    bad_field("format", "'format' must be \"json\" or a JSON schema object");
  }
}

// Ollama's images (base64, without a data: prefix) as OpenAI's image_url
// parts, before the text, where Ollama's own prompts put them.
json with_images(const json& content, const json& images, const std::string& at) {
  if (!images.is_array()) bad_field(at, "'" + at + "' must be an array of base64 strings");
  if (!content.is_string()) bad_field(at, "'" + at + "' belongs to a message whose content is a string");
  check_image_count(images.size(), at);
  json parts = json::array();
  for (size_t k = 0; k < images.size(); ++k) {
    const std::string here = at + "[" + std::to_string(k) + "]";
    if (!images[k].is_string()) bad_field(here, "'" + here + "' must be a base64 string");
    (void)image_from_base64(images[k].get<std::string>(), here);  // a mistake named as the client sent it
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", "data:image;base64," + images[k].get<std::string>()}}}});
  }
  parts.push_back({{"type", "text"}, {"text", content}});
  return parts;
}

// Ollama's messages as OpenAI's: tool calls with arguments as an object and
// no id, the thinking beside the content, tool results named by tool_name.
json openai_messages(const json& list) {
  if (!list.is_array()) bad_field("messages", "'messages' must be an array");
  json out = json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_field(at, "'" + at + "' must be an object");
    json msg = json::object();
    for (const char* key : {"role", "content"}) {
      if (m.contains(key)) msg[key] = m[key];
    }
    if (has_field(m, "images") && !(m["images"].is_array() && m["images"].empty())) {
      msg["content"] = with_images(m.contains("content") ? m["content"] : json(""), m["images"], at + ".images");
    }
    if (has_field(m, "thinking")) {
      if (!m["thinking"].is_string()) bad_field(at + ".thinking", "'" + at + ".thinking' must be a string");
      msg["reasoning_content"] = m["thinking"];
    }
    if (has_field(m, "tool_name")) msg["name"] = m["tool_name"];
    if (has_field(m, "tool_calls")) {
      const json& calls = m["tool_calls"];
      if (!calls.is_array()) bad_field(at + ".tool_calls", "'" + at + ".tool_calls' must be an array");
      json oc = json::array();
      for (size_t k = 0; k < calls.size(); ++k) {
        const json& c = calls[k];
        const std::string here = at + ".tool_calls[" + std::to_string(k) + "]";
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
          bad_field(here, "'" + here + "' must be an object with a 'function'");
        }
        json f = c["function"];
        if (f.contains("arguments") && !f["arguments"].is_string()) f["arguments"] = f["arguments"].dump();
        f.erase("index");
        oc.push_back({{"id", string_or(c, "id", "call_" + std::to_string(i) + "_" + std::to_string(k), here)}, {"type", "function"}, {"function", f}});
      }
      msg["tool_calls"] = oc;
      if (!msg.contains("content") || (msg["content"].is_string() && msg["content"].get<std::string>().empty())) {
        msg["content"] = nullptr;
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

std::string ollama_model(const json& j) {
  const char* key = j.contains("model") || !j.contains("name") ? "model" : "name";
  if (!has_field(j, key)) bad_field("model", "'model' is required", "model_required");
  return get_field<std::string>(j, key, "a string");
}

OllamaRequest parse_ollama_request(const std::string& body, OllamaEndpoint endpoint) {
  const json j = parse_object(body);
  OllamaRequest o;
  o.model = ollama_model(j);
  o.openai["model"] = o.model;
  o.openai["stream"] = has_field(j, "stream") ? get_field<bool>(j, "stream", "true or false") : true;
  if (has_field(j, "keep_alive")) {
    o.keep_alive_ms = parse_duration_ms(j["keep_alive"], "keep_alive");
    o.openai["keep_alive"] = j["keep_alive"];
  }
  take_options(j, o);
  take_format(j, o);
  if (has_field(j, "think")) {
    // true or false, or a level ("high", "medium", "low"), which thinks.
    const json& t = j["think"];
    if (!t.is_boolean() && !t.is_string()) bad_field("think", "'think' must be true, false or a level such as \"high\"");
    o.think = t.is_boolean() ? t.get<bool>() : true;
  }
  if (endpoint == OllamaEndpoint::chat) {
    const json messages = has_field(j, "messages") ? openai_messages(j["messages"]) : json::array();
    o.load_only = messages.empty();
    o.openai["messages"] = messages;
    if (has_field(j, "tools")) o.openai["tools"] = j["tools"];
    return o;
  }
  for (const char* unsupported : {"suffix", "template", "context"}) {
    if (!has_field(j, unsupported)) continue;
    const json& v = j[unsupported];
    if ((v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty())) continue;
    const std::string why = std::string(unsupported) == "template"
                                ? "Go templates are not read here; give a model a template with chat_template in --config"
                                : std::string(unsupported) == "context"
                                      ? "no token context is kept between requests; send the whole prompt (the prompt cache "
                                        "reuses what it has seen)"
                                      : "fill-in-the-middle is not offered";
    bad_field(unsupported, "'" + std::string(unsupported) + "': " + why, "unsupported_field");
  }
  const bool images = has_field(j, "images") && !(j["images"].is_array() && j["images"].empty());
  const std::string prompt = has_field(j, "prompt") ? get_field<std::string>(j, "prompt", "a string") : "";
  const std::string system = has_field(j, "system") ? get_field<std::string>(j, "system", "a string") : "";
  const bool raw = has_field(j, "raw") && get_field<bool>(j, "raw", "true or false");
  o.load_only = prompt.empty();
  if (raw) {
    if (images) {
      bad_field("images", "'images' with 'raw': a raw prompt has no place for them; send them without 'raw'",
                "unsupported_content");
    }
    // The prompt as it is, no template: a plain completion.
    o.chat = false;
    o.openai["prompt"] = prompt;
  } else {
    json messages = json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", images ? with_images(prompt, j["images"], "images") : json(prompt)}});
    o.openai["messages"] = messages;
  }
  return o;
}

CompletionRequest ollama_completion_request(const OllamaRequest& o, const json& defaults) {
  json merged = ollama_defaults();
  for (const auto& [key, value] : defaults.items()) merged[key] = value;
  CompletionRequest r = parse_completion_request(o.openai, o.chat, merged);
  // OpenAI gives a plain completion 16 tokens by default; Ollama, no limit.
  if (!o.predict_given && !has_field(defaults, "max_tokens")) r.generate.max_tokens = -1;
  for (const std::string& s : o.stops) r.generate.stop.push_back(s);
  if (o.think) r.chat_input.think = o.think;  // else the model's default, if it has one
  return r;
}

OllamaEmbedRequest parse_ollama_embed_request(const std::string& body, bool legacy) {
  const json j = parse_object(body);
  OllamaEmbedRequest r;
  r.model = ollama_model(j);
  const char* input_key = legacy ? "prompt" : "input";
  if (!has_field(j, input_key)) bad_field(input_key, std::string("'") + input_key + "' is required");
  const json& in = j[input_key];
  const bool strings = in.is_array() && !in.empty() && std::all_of(in.begin(), in.end(), [](const json& s) { return s.is_string(); });
  if (!(in.is_string() || (!legacy && strings))) {
    bad_field(input_key, legacy ? "'prompt' must be a string" : "'input' must be a string or a non-empty array of strings");
  }
  if (in.is_array()) check_embed_inputs(in.size(), input_key);
  r.input = in;
  if (has_field(j, "truncate")) r.truncate = get_field<bool>(j, "truncate", "true or false");
  if (has_field(j, "dimensions")) {
    bad_field("dimensions", "'dimensions' cannot be set: a model's embeddings have its own width", "unsupported_dimensions");
  }
  if (has_field(j, "keep_alive")) r.keep_alive_ms = parse_duration_ms(j["keep_alive"], "keep_alive");
  return r;
}

}  // namespace reclaim::server
