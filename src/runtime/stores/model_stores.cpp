#include "runtime/stores/model_stores.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/error.h"
#include "runtime/stores/pull.h"

namespace reclaim {

namespace fs = std::filesystem;

StoreKind store_kind(const std::string& name) {
  if (name == "pulled") return StoreKind::pulled;
  if (name == "ollama") return StoreKind::ollama;
  if (name == "hf") return StoreKind::hf;
  if (name == "lmstudio") return StoreKind::lmstudio;
  throw Error("'" + name + "' is not a model store (pulled, ollama, hf or lmstudio)");
}

const char* store_name(StoreKind kind) {
  switch (kind) {
    case StoreKind::pulled: return "pulled";
    case StoreKind::ollama: return "ollama";
    case StoreKind::hf: return "hf";
    case StoreKind::lmstudio: return "lmstudio";
  }
  return "?";
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "";
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string first_existing(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (!c.empty() && is_dir(c)) return c;
  }
  for (const std::string& c : candidates) {
    if (!c.empty()) return c;
  }
  return "";
}

}  // namespace

std::string default_store_root(StoreKind kind) {
  const std::string home = env("HOME");
  switch (kind) {
    case StoreKind::pulled: return pulled_store_root();
    case StoreKind::ollama:
      if (const std::string e = env("OLLAMA_MODELS"); !e.empty()) return e;
      // A user's own install, then the Linux service's (its user's home).
      return first_existing({home.empty() ? "" : home + "/.ollama/models", "/usr/share/ollama/.ollama/models"});
    case StoreKind::hf:
      // The order llama.cpp's -hf reads them in (common/hf-cache.cpp), so
      // that what it downloaded is what is served.
      if (const std::string e = env("LLAMA_CACHE"); !e.empty()) return e;
      if (const std::string e = env("HF_HUB_CACHE"); !e.empty()) return e;
      if (const std::string e = env("HUGGINGFACE_HUB_CACHE"); !e.empty()) return e;
      if (const std::string e = env("HF_HOME"); !e.empty()) return e + "/hub";
      if (const std::string e = env("XDG_CACHE_HOME"); !e.empty()) return e + "/huggingface/hub";
      return home.empty() ? "" : home + "/.cache/huggingface/hub";
    case StoreKind::lmstudio:
      // LM Studio 0.3's folder, then 0.2's.
      return first_existing({home.empty() ? "" : home + "/.lmstudio/models", home.empty() ? "" : home + "/.cache/lm-studio/models"});
  }
  return "";
}

std::vector<StoreModel> scan_store(const Store& store, std::vector<std::string>& skipped) {
  if (store.root.empty() || !is_dir(store.root)) return {};
  switch (store.kind) {
    case StoreKind::pulled: {
      // Hugging Face's models answer to the name they were pulled by too.
      std::vector<StoreModel> models = stores::scan_ollama(store.root, skipped);
      for (StoreModel& m : models) {
        if (m.name.rfind("hf.co/", 0) == 0) m.aliases.push_back(m.name.substr(6));
      }
      return models;
    }
    case StoreKind::ollama: return stores::scan_ollama(store.root, skipped);
    case StoreKind::hf: return stores::scan_hf(store.root, skipped);
    case StoreKind::lmstudio: return stores::scan_lmstudio(store.root, skipped);
  }
  return {};
}

std::string store_stamp(const Store& store) {
  // Every folder and file down to the depth the store's names live at: a
  // tag pulled again, a snapshot's ref moved or a file added changes one of
  // them. Bounded: a store of more entries than this is stamped by them.
  constexpr size_t kMaxEntries = 100000;
  std::error_code ec;
  const bool manifests = store.kind == StoreKind::ollama || store.kind == StoreKind::pulled;
  const std::string top = manifests ? store.root + "/manifests" : store.root;
  if (!is_dir(top)) return "absent";
  size_t seen = 0;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  fs::recursive_directory_iterator it(top, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end && seen < kMaxEntries; it.increment(ec), ++seen) {
    if (it.depth() >= 5) it.disable_recursion_pending();
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    mix(it->path().string());
    mix(std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_size));
  }
  return std::to_string(seen) + ":" + std::to_string(h);
}

namespace stores {

bool parse_gguf_name(const std::string& file, GgufName& out) {
  static const std::regex split(R"(^(.+)-([0-9]{5})-of-([0-9]{5})$)", std::regex::icase);
  static const std::regex tag(R"([-.]([A-Z0-9_]+)$)", std::regex::icase);
  if (file.size() <= 5) return false;
  std::string ext = file.substr(file.size() - 5);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext != ".gguf") return false;
  out = GgufName{};
  out.stem = file.substr(0, file.size() - 5);
  std::smatch m;
  if (std::regex_match(out.stem, m, split)) {
    out.part = std::stoi(m[2].str());
    out.parts = std::stoi(m[3].str());
    out.stem = m[1].str();
  }
  if (std::regex_search(out.stem, m, tag)) {
    out.tag = m[1].str();
    for (char& c : out.tag) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return true;
}

std::string read_small_file(const std::string& path, size_t limit) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("'" + path + "' cannot be read");
  std::string text(limit + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  const auto n = static_cast<size_t>(f.gcount());
  if (n > limit) throw Error("'" + path + "' is larger than " + std::to_string(limit) + " bytes");
  text.resize(n);
  return text;
}

}  // namespace stores

}  // namespace reclaim
