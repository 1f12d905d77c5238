#include "cli/config_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <limits>
#include <map>

#include "engine/embed.h"
#include "engine/speculation.h"
#include "server/openai.h"

namespace reclaim::cli {

namespace {

using nlohmann::json;

const char* const kKeys =
    "path, aliases, ctx, parallel, threads, gpu_layers, pooling, spec_type, draft, mmproj, draft_max, draft_min, chat_template, jinja, "
    "system, keep_alive, pin, preload, defaults";

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const toml::node& at, const std::string& key, const std::string& what) const {
    throw ConfigError(file_ + ":" + std::to_string(at.source().begin.line) + ": " + key + ": " + what);
  }

  std::string string(const toml::node& v, const std::string& key) const {
    if (!v.is_string()) fail(v, key, "must be a string");
    return *v.value<std::string>();
  }

  int32_t integer(const toml::node& v, const std::string& key, int64_t lo, int64_t hi) const {
    if (!v.is_integer()) fail(v, key, "must be an integer");
    const int64_t n = *v.value<int64_t>();
    if (n < lo || n > hi) fail(v, key, "must be " + std::to_string(lo) + ".." + std::to_string(hi) + ", not " + std::to_string(n));
    return static_cast<int32_t>(n);
  }

  bool boolean(const toml::node& v, const std::string& key) const {
    if (!v.is_boolean()) fail(v, key, "must be true or false");
    return *v.value<bool>();
  }

  // A TOML value as the JSON a request would carry it in.
  json to_json(const toml::node& v, const std::string& key) const {
    if (v.is_string()) return *v.value<std::string>();
    if (v.is_integer()) return *v.value<int64_t>();
    if (v.is_floating_point()) return *v.value<double>();
    if (v.is_boolean()) return *v.value<bool>();
    if (const toml::array* a = v.as_array()) {
      json out = json::array();
      size_t i = 0;
      for (const toml::node& e : *a) out.push_back(to_json(e, key + "[" + std::to_string(i++) + "]"));
      return out;
    }
    // An object field of a request (chat_template_kwargs, response_format).
    if (const toml::table* t = v.as_table()) {
      json out = json::object();
      for (const auto& [k, e] : *t) out[std::string(k.str())] = to_json(e, key + "." + std::string(k.str()));
      return out;
    }
    fail(v, key, "must be a string, a number, true or false, or an array or table of them");
  }

  // A name (or alias) of one model only, across the file.
  void claim(const std::string& name, const toml::node& at, const std::string& key, const std::string& model) {
    const std::string where = "models." + model + " (line " + std::to_string(at.source().begin.line) + ")";
    auto [it, fresh] = names_.emplace(name, where);
    if (!fresh) fail(at, key, "'" + name + "' is already a name of " + it->second);
  }

  ModelSpec model(const std::string& name, const toml::node& node) {
    const std::string at = "models." + name;
    const toml::table* t = node.as_table();
    if (!t) fail(node, at, "must be a table ([" + at + "])");
    ModelSpec spec;
    spec.name = name;
    try {
      Registry::check_name(name);
    } catch (const std::exception& e) {
      fail(node, at, e.what());
    }
    claim(name, node, at, name);
    ModelSettings& s = spec.settings;
    for (auto&& [k, v] : *t) {
      const std::string key = at + "." + std::string(k.str());
      const std::string_view field = k.str();
      if (field == "path") {
        spec.path = string(v, key);
        if (spec.path.empty()) fail(v, key, "is empty");
      } else if (field == "aliases") {
        const toml::array* a = v.as_array();
        if (!a) fail(v, key, "must be an array of names");
        for (const toml::node& e : *a) {
          const std::string alias = string(e, key);
          try {
            Registry::check_name(alias);
          } catch (const std::exception& ex) {
            fail(e, key, ex.what());
          }
          claim(alias, e, key, name);
          s.aliases.push_back(alias);
        }
      } else if (field == "ctx") {
        s.n_ctx = integer(v, key, 0, 1 << 24);
      } else if (field == "parallel") {
        s.parallel = integer(v, key, 1, 256);
      } else if (field == "threads") {
        s.n_threads = integer(v, key, 0, 4096);
      } else if (field == "gpu_layers") {
        s.n_gpu_layers = integer(v, key, -1, 1 << 20);
      } else if (field == "chat_template") {
        s.chat_template = string(v, key);
      } else if (field == "pooling") {
        s.pooling = string(v, key);
        if (!pooling_from_name(*s.pooling)) fail(v, key, std::string("must be ") + kPoolingNames);
      } else if (field == "spec_type") {
        s.spec_type = string(v, key);
        Speculation::Kind kind;
        if (!speculation_from_name(*s.spec_type, kind)) fail(v, key, std::string("must be ") + kSpeculationNames);
      } else if (field == "draft") {
        s.draft = string(v, key);
        if (s.draft->empty()) fail(v, key, "is empty");
      } else if (field == "mmproj") {
        s.mmproj = string(v, key);
        if (s.mmproj->empty()) fail(v, key, "is empty");
      } else if (field == "draft_max") {
        s.draft_max = integer(v, key, 1, kMaxDraft);
      } else if (field == "draft_min") {
        s.draft_min = integer(v, key, 0, kMaxDraft);
      } else if (field == "jinja") {
        s.jinja = boolean(v, key);
      } else if (field == "system") {
        s.system = string(v, key);
      } else if (field == "keep_alive") {
        try {
          s.keep_alive = std::chrono::milliseconds(server::parse_duration_ms(to_json(v, key), "keep_alive"));
        } catch (const server::ApiException& e) {
          fail(v, key, e.what());
        }
      } else if (field == "pin") {
        spec.pinned = boolean(v, key);
      } else if (field == "preload") {
        s.preload = boolean(v, key);
      } else if (field == "defaults") {
        s.request_defaults = defaults(v, key);
      } else {
        fail(v, key, "is not a model setting (" + std::string(kKeys) + ")");
      }
    }
    if (spec.path.empty()) fail(node, at, "has no 'path'");
    if (s.spec_type == "draft-simple" && !s.draft) fail(node, at + ".spec_type", "draft-simple needs a 'draft' model file");
    return spec;
  }

  // Checked as a request's own fields are, each on its own line.
  json defaults(const toml::node& node, const std::string& at) const {
    const toml::table* t = node.as_table();
    if (!t) fail(node, at, "must be a table of request fields");
    json out = json::object();
    for (auto&& [k, v] : *t) {
      const std::string field(k.str());
      const std::string key = at + "." + field;
      if (field == "model" || field == "messages" || field == "prompt" || field == "stream") {
        fail(v, key, "is the request's own, not a default");
      }
      out[field] = to_json(v, key);
      if (const std::string why = request_default_refusal(field, out[field]); !why.empty()) fail(v, key, why);
    }
    return out;
  }

 private:
  std::string file_;
  std::map<std::string, std::string> names_;
};

}  // namespace

std::string request_default_refusal(const std::string& field, const json& value) {
  if (field == "model" || field == "messages" || field == "prompt" || field == "stream") {
    return "is the request's own, not a default";
  }
  // Checked as a completion's field and as a chat's (some fields only a
  // chat reads, chat_template_kwargs among them); a chat's refusal counts
  // where it names this field.
  const json completion = {{"model", "x"}, {"prompt", "x"}, {field, value}};
  const json chat = {{"model", "x"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}, {field, value}};
  for (const bool as_chat : {false, true}) {
    try {
      (void)server::parse_completion_request((as_chat ? chat : completion).dump(), as_chat);
    } catch (const server::ApiException& e) {
      if (!as_chat || e.error().param == field) return e.what();
    }
  }
  return "";
}

ServeConfig read_serve_config(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const int line = static_cast<int>(e.source().begin.line);
    throw ConfigError(path + ":" + std::to_string(line) + ": " + std::string(e.description()));
  }
  Reader r(path);
  ServeConfig out;
  for (auto&& [k, v] : root) {
    if (k.str() != "models") r.fail(v, std::string(k.str()), "is not a section of the file (models)");
    const toml::table* models = v.as_table();
    if (!models) r.fail(v, "models", "must be a table of [models.NAME] tables");
    // In the file's order, which the table does not keep.
    std::vector<std::pair<const toml::key*, const toml::node*>> in_order;
    for (auto&& [name, m] : *models) in_order.emplace_back(&name, &m);
    std::sort(in_order.begin(), in_order.end(), [](const auto& a, const auto& b) {
      return a.second->source().begin.line < b.second->source().begin.line;
    });
    for (const auto& [name, m] : in_order) out.models.push_back(r.model(std::string(name->str()), *m));
  }
  return out;
}

}  // namespace reclaim::cli
