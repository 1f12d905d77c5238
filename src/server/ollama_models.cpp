// What Ollama's clients list and show: /api/tags (every model the server can
// serve), /api/ps (the loaded ones, with the ledger's bytes) and /api/show
// (a model's header and template). Read from the GGUF header, not a load.
#include <openssl/evp.h>
#include <sys/stat.h>

#include <cstdio>

#include "engine/chat.h"
#include "engine/gguf_summary.h"
#include "server/model_fields.h"
#include "server/ollama.h"

namespace reclaim::server {

using nlohmann::json;

namespace {

struct FileFacts {
  int64_t size = 0;
  std::chrono::system_clock::time_point modified{};
  std::string digest;
};

// Ollama's digest is its manifest's; a file here has none. This one names
// the file as it is now (path, size, modification time), so that it changes
// when the file does, without reading gigabytes for each listing.
FileFacts file_facts(const std::string& path) {
  FileFacts f;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return f;
  f.size = st.st_size;
  f.modified = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                                      std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  const std::string id = path + "\n" + std::to_string(st.st_size) + "\n" + std::to_string(st.st_mtim.tv_sec) + "." +
                         std::to_string(st.st_mtim.tv_nsec);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(id.data(), id.size(), md, &n, EVP_sha256(), nullptr) == 1) {
    static const char* hex = "0123456789abcdef";
    for (unsigned int i = 0; i < n; ++i) {
      f.digest += hex[md[i] >> 4];
      f.digest += hex[md[i] & 15];
    }
  }
  return f;
}

// The header, or nothing when the file cannot be read (a listing still names
// the model; a load says what is wrong with it).
std::optional<GgufSummary> summary_of(const std::string& path) {
  try {
    return gguf_summary(path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

json details_json(const std::optional<GgufSummary>& g) {
  json d = {{"parent_model", ""}, {"format", "gguf"}, {"family", ""}, {"families", nullptr},
            {"parameter_size", ""}, {"quantization_level", ""}};
  if (g) {
    d["family"] = g->architecture;
    d["families"] = json::array({g->architecture});
    d["parameter_size"] = parameter_size(g->n_params);
    d["quantization_level"] = g->file_type;
  }
  return d;
}

int64_t device_bytes(const ModelStatus& s) {
  int64_t n = 0;
  for (const auto& [place, bytes] : s.bytes_by_device) {
    if (place != "host") n += bytes;
  }
  return n;
}

}  // namespace

json ollama_tags(const Registry& registry) {
  json models = json::array();
  for (const ModelStatus& s : registry.list()) {
    if (s.removing) continue;
    const FileFacts f = file_facts(s.path);
    models.push_back({{"name", s.name},
                      {"model", s.name},
                      {"modified_at", ollama_time(f.modified)},
                      {"size", f.size},
                      {"digest", f.digest},
                      {"details", details_json(summary_of(s.path))}});
  }
  return {{"models", models}};
}

json ollama_ps(const Registry& registry) {
  json models = json::array();
  const auto now = std::chrono::system_clock::now();
  for (const ModelStatus& s : registry.list()) {
    if (s.state != ModelState::loaded) continue;
    const FileFacts f = file_facts(s.path);
    // Never: Ollama writes a date centuries away; this one is 200 years.
    const auto expires = s.expires_at.value_or(now + std::chrono::hours(24 * 365 * 200));
    json m = {{"name", s.name},
              {"model", s.name},
              {"size", s.loaded_bytes},
              {"digest", f.digest},
              {"details", details_json(summary_of(s.path))},
              {"expires_at", ollama_time(expires)},
              {"size_vram", device_bytes(s)}};
    // reclaim's own, named as /v1/models names them.
    for (const ModelField& field : model_fields()) {
      if (field.in_ollama_ps) m[field.key] = field.value(s);
    }
    models.push_back(std::move(m));
  }
  return {{"models", models}};
}

json ollama_show(const Registry& registry, const std::string& model, const std::string& chat_template) {
  const ModelStatus s = registry.status(model);
  const std::optional<GgufSummary> g = summary_of(s.path);
  if (!g) throw InvalidModelFile("model file '" + s.path + "' is not a readable GGUF file");
  const std::string tmpl = chat_template.empty() ? g->chat_template : chat_template;
  json capabilities = json::array({"completion"});
  const ChatTemplateCaps caps = chat_template_caps(tmpl);
  if (caps.tools) capabilities.push_back("tools");
  if (caps.thinking) capabilities.push_back("thinking");
  if (!s.mmproj.empty()) capabilities.push_back("vision");
  // A model that pools its own (an embedding model's header says how).
  if (g->scalars.contains(g->architecture + ".pooling_type")) capabilities.push_back("embedding");
  json info = g->scalars;
  info.erase("tokenizer.chat_template");  // it is "template"
  info["general.parameter_count"] = g->n_params;
  const FileFacts f = file_facts(s.path);
  return {{"modelfile", "# reclaim serves " + s.path + "\nFROM " + s.path + "\n"},
          {"parameters", ""},
          {"template", tmpl},
          {"details", details_json(g)},
          {"model_info", info},
          {"capabilities", capabilities},
          {"modified_at", ollama_time(f.modified)}};
}

}  // namespace reclaim::server
