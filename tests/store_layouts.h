// Model stores laid out as their tools lay them out, in a test's folder:
// Ollama's (manifests naming blobs/sha256-HEX by the sha256 of their bytes),
// the Hugging Face hub cache (snapshot files linked into blobs/, refs/main),
// and LM Studio's PUBLISHER/REPO/FILE.gguf.
#pragma once

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace reclaim::testing {

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

struct OllamaLayer {
  std::string media_type;  // "model", "params", "system", "projector", "template", "adapter", "license"
  std::string bytes;
};

// manifests/HOST/NS/MODEL/TAG (`ref`) and its layers' blobs.
inline void add_ollama_model(const std::string& root, const std::string& ref, const std::vector<OllamaLayer>& layers) {
  nlohmann::json layer_list = nlohmann::json::array();
  for (const OllamaLayer& l : layers) {
    const std::string digest = sha256_hex(l.bytes);
    write_bytes(root + "/blobs/sha256-" + digest, l.bytes);
    layer_list.push_back({{"mediaType", "application/vnd.ollama.image." + l.media_type},
                          {"digest", "sha256:" + digest},
                          {"size", l.bytes.size()}});
  }
  const std::string config = R"({"model_format":"gguf","model_family":"llama"})";
  write_bytes(root + "/blobs/sha256-" + sha256_hex(config), config);
  const nlohmann::json manifest = {
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.docker.distribution.manifest.v2+json"},
      {"config", {{"mediaType", "application/vnd.docker.container.image.v1+json"}, {"digest", "sha256:" + sha256_hex(config)}, {"size", config.size()}}},
      {"layers", layer_list}};
  write_bytes(root + "/manifests/" + ref, manifest.dump());
}

// models--ORG--REPO/blobs/SHA and snapshots/REV/FILE linking to it; refs/main
// names REV.
inline void add_hf_file(const std::string& root, const std::string& repo, const std::string& rev, const std::string& file,
                        const std::string& bytes) {
  std::string folder = "models--" + repo;
  folder.replace(folder.find('/'), 1, "--");
  const std::string top = root + "/" + folder, digest = sha256_hex(bytes);
  write_bytes(top + "/blobs/" + digest, bytes);
  const std::filesystem::path link = top + "/snapshots/" + rev + "/" + file;
  std::filesystem::create_directories(link.parent_path());
  std::filesystem::create_symlink(std::filesystem::relative(top + "/blobs/" + digest, link.parent_path()), link);
  write_bytes(top + "/refs/main", rev);
}

}  // namespace reclaim::testing
