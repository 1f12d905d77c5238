// Ollama's store: manifests/HOST/NAMESPACE/MODEL/TAG, each a JSON manifest
// (Docker's distribution manifest v2) whose layers name blobs/sha256-HEX by
// their digests. The model layer is the GGUF; the params layer (JSON) holds
// the Modelfile's PARAMETERs, the system layer its SYSTEM text, the projector
// layer a vision model's mmproj. The template layer is a Go template, which
// reclaim does not run: the GGUF's own chat template is used.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "runtime/stores/model_stores.h"

namespace reclaim::stores {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxManifest = 1 << 20;  // a manifest of a thousand layers is ~200 KiB
constexpr size_t kMaxParams = 1 << 20;
constexpr size_t kMaxSystem = 1 << 20;
constexpr const char* kRegistry = "registry.ollama.ai";

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// blobs/sha256-HEX for "sha256:HEX"; empty for anything else (a digest is
// never a path: it cannot name a file outside the store).
std::string blob_path(const std::string& root, const json& layer) {
  if (!layer.is_object() || !layer.contains("digest") || !layer["digest"].is_string()) return "";
  const std::string d = layer["digest"].get<std::string>();
  if (d.size() != 7 + 64 || d.compare(0, 7, "sha256:") != 0) return "";
  if (!std::all_of(d.begin() + 7, d.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) return "";
  return root + "/blobs/sha256-" + d.substr(7);
}

void read_manifest(const std::string& root, const fs::path& file, const std::string& name, std::vector<StoreModel>& out,
                   std::vector<std::string>& skipped) {
  const json m = json::parse(read_small_file(file.string(), kMaxManifest), nullptr, false);
  if (!m.is_object() || !m.contains("layers") || !m["layers"].is_array()) {
    skipped.push_back("ollama: " + name + ": its manifest is not a JSON manifest with layers (" + file.string() + ")");
    return;
  }
  StoreModel s;
  s.name = name;
  for (const json& layer : m["layers"]) {
    const std::string type = layer.is_object() && layer.contains("mediaType") && layer["mediaType"].is_string()
                                 ? layer["mediaType"].get<std::string>()
                                 : "";
    const std::string blob = blob_path(root, layer);
    if (type == "application/vnd.ollama.image.adapter") {
      skipped.push_back("ollama: " + name + ": it has a LoRA adapter layer, which reclaim does not apply");
      return;
    }
    if (type != "application/vnd.ollama.image.model" && type != "application/vnd.ollama.image.projector" &&
        type != "application/vnd.ollama.image.params" && type != "application/vnd.ollama.image.system") {
      continue;  // template (Go), license, messages, config
    }
    if (blob.empty()) {
      skipped.push_back("ollama: " + name + ": a " + type + " layer has no sha256 digest");
      return;
    }
    if (!is_file(blob)) {
      skipped.push_back("ollama: " + name + ": its " + type.substr(type.rfind('.') + 1) + " blob " + blob +
                        " is missing (a pull that did not finish?)");
      return;
    }
    if (type == "application/vnd.ollama.image.model") {
      if (!s.path.empty()) {
        skipped.push_back("ollama: " + name + ": it has more than one model layer");
        return;
      }
      s.path = blob;
    } else if (type == "application/vnd.ollama.image.projector") {
      s.projector = blob;
    } else if (type == "application/vnd.ollama.image.params") {
      const json p = json::parse(read_small_file(blob, kMaxParams), nullptr, false);
      if (!p.is_object()) {
        skipped.push_back("ollama: " + name + ": its params layer is not a JSON object");
        return;
      }
      s.params = p;
    } else {
      s.system = read_small_file(blob, kMaxSystem);
    }
  }
  if (s.path.empty()) {
    skipped.push_back("ollama: " + name + ": it has no model layer (a safetensors model, which llama.cpp does not load?)");
    return;
  }
  // Ollama answers "qwen2.5" for "qwen2.5:latest".
  if (name.size() > 7 && name.compare(name.size() - 7, 7, ":latest") == 0) s.aliases.push_back(name.substr(0, name.size() - 7));
  out.push_back(std::move(s));
}

}  // namespace

std::string ollama_name(const std::string& host, const std::string& ns, const std::string& model, const std::string& tag) {
  std::string name = model + ":" + tag;
  if (host != kRegistry) return host + "/" + ns + "/" + name;
  if (ns != "library") return ns + "/" + name;
  return name;
}

std::vector<StoreModel> scan_ollama(const std::string& root, std::vector<std::string>& skipped) {
  std::vector<StoreModel> out;
  const fs::path manifests = fs::path(root) / "manifests";
  std::error_code ec;
  // manifests/HOST/NAMESPACE/MODEL/TAG: exactly four levels, files at the last.
  std::vector<std::pair<std::string, fs::path>> found;
  for (const auto& host : fs::directory_iterator(manifests, ec)) {
    if (!host.is_directory()) continue;
    for (const auto& ns : fs::directory_iterator(host.path(), ec)) {
      if (!ns.is_directory()) continue;
      for (const auto& model : fs::directory_iterator(ns.path(), ec)) {
        if (!model.is_directory()) continue;
        for (const auto& tag : fs::directory_iterator(model.path(), ec)) {
          if (!tag.is_regular_file()) continue;
          // A manifest being written (TAG.tmp.PID, then renamed), or left by
          // a writer that died: not a tag.
          if (tag.path().filename().string().find(".tmp.") != std::string::npos) continue;
          found.emplace_back(ollama_name(host.path().filename().string(), ns.path().filename().string(),
                                         model.path().filename().string(), tag.path().filename().string()),
                             tag.path());
        }
      }
    }
  }
  std::sort(found.begin(), found.end());
  for (const auto& [name, file] : found) {
    try {
      read_manifest(root, file, name, out, skipped);
    } catch (const std::exception& e) {
      skipped.push_back("ollama: " + name + ": " + e.what());
    }
  }
  return out;
}

}  // namespace reclaim::stores
