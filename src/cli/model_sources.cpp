#include "cli/model_sources.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <set>

#include "cli/config_file.h"
#include "core/error.h"
#include "engine/owners.h"
#include "engine/test_model.h"

namespace reclaim::cli {

using nlohmann::json;

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<ModelSpec> models_in_config(const std::string& file) {
  std::vector<ModelSpec> out;
  if (file.empty()) return out;
  for (ModelSpec& m : read_serve_config(file).models) {
    try {
      check_model_file(m.path);
    } catch (const std::exception& e) {
      throw Error(file + ": models." + m.name + ".path: " + e.what());
    }
    try {
      if (m.settings.draft) check_model_file(*m.settings.draft);
    } catch (const std::exception& e) {
      throw Error(file + ": models." + m.name + ".draft: " + e.what());
    }
    try {
      if (m.settings.mmproj) check_model_file(*m.settings.mmproj);
    } catch (const std::exception& e) {
      throw Error(file + ": models." + m.name + ".mmproj: " + e.what());
    }
    out.push_back(std::move(m));
  }
  return out;
}

// When a folder's entries last changed (its mtime and ctime, in ns).
std::string entries_stamp(const std::string& dir) {
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0) return "";
  return std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "/" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

bool is_gguf(const std::string& name) { return name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0; }

// A projector's file, as llama-server's router and llama.cpp's -hf name
// them: "mmproj" first (any case).
bool is_projector_file(const std::string& name) {
  if (name.size() < 6) return false;
  std::string head = name.substr(0, 6);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return head == "mmproj";
}

// The entries of `dir`: its .gguf files and its folders, sorted.
void read_folder(const std::string& dir, std::vector<std::string>& files, std::vector<std::string>& folders) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw Error("'" + dir + "' cannot be read: " + std::strerror(errno));
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st {};
    if (::stat((dir + "/" + n).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) folders.push_back(n);
    if (S_ISREG(st.st_mode) && is_gguf(n)) files.push_back(n);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  std::sort(folders.begin(), folders.end());
}

// When the folder's entries, or those of a model's folder in it, last
// changed: a projector put beside a model in its folder changes that model.
std::string folder_stamp(const std::string& dir) {
  std::string stamp = entries_stamp(dir);
  std::vector<std::string> files, folders;
  try {
    if (!stamp.empty()) read_folder(dir, files, folders);
  } catch (const Error&) {
    return stamp;
  }
  for (const std::string& f : folders) stamp += "|" + f + ":" + entries_stamp(dir + "/" + f);
  return stamp;
}

// A folder of one model (llama-server's router layout): its one GGUF, or a
// split one's first part, with its projector beside it. False where it
// holds no model, or several.
bool model_in_subfolder(const std::string& dir, const std::string& name, ModelSpec& out) {
  std::vector<std::string> files, folders;
  try {
    read_folder(dir, files, folders);
  } catch (const Error&) {
    return false;
  }
  std::vector<std::string> models, projectors;
  for (const std::string& f : files) (is_projector_file(f) ? projectors : models).push_back(f);
  std::string model;
  if (models.size() == 1) {
    model = models[0];
  } else {
    size_t firsts = 0;
    for (const std::string& f : models) {
      if (f.find("-00001-of-") != std::string::npos) {
        model = f;
        ++firsts;
      }
    }
    if (firsts != 1) model.clear();  // several models: which one is the folder's is unsaid
  }
  if (model.empty() || projectors.size() > 1) return false;
  out = {name, dir + "/" + model, false};
  if (!projectors.empty()) out.settings.mmproj = dir + "/" + projectors[0];
  return true;
}

}  // namespace

std::vector<ModelSpec> models_in_folder(const std::string& dir) {
  std::vector<ModelSpec> out;
  if (dir.empty()) return out;
  std::vector<std::string> files, folders;
  try {
    read_folder(dir, files, folders);
  } catch (const Error& e) {
    throw Error("--models-dir " + std::string(e.what()));
  }
  std::set<std::string> projectors;
  for (const std::string& f : files) {
    if (is_projector_file(f)) projectors.insert(f);
  }
  for (const std::string& f : files) {
    if (is_projector_file(f)) continue;
    const std::string name = f.substr(0, f.size() - 5);
    out.push_back({name, dir + "/" + f, false});
    // Beside it: "mmproj-NAME.gguf".
    if (const std::string p = "mmproj-" + f; projectors.count(p)) out.back().settings.mmproj = dir + "/" + p;
  }
  for (const std::string& sub : folders) {
    // A file of the same name is that name's model already.
    const bool taken = std::any_of(out.begin(), out.end(), [&](const ModelSpec& m) { return m.name == sub; });
    ModelSpec m;
    if (!taken && model_in_subfolder(dir + "/" + sub, sub, m)) out.push_back(std::move(m));
  }
  return out;
}

std::vector<ModelSpec> models_from_flags(const std::vector<std::string>& models, const std::string& draft,
                                         const std::string& mmproj) {
  if (!draft.empty()) check_model_file(draft);
  if (!mmproj.empty()) check_model_file(mmproj);
  std::vector<ModelSpec> out;
  for (const std::string& m : models) {
    std::string path = m, alias;
    if (const size_t at = m.find(".gguf:"); at != std::string::npos) {
      path = m.substr(0, at + 5);
      alias = m.substr(at + 6);
    } else if (const size_t colon = m.rfind(':');
               colon != std::string::npos && m.find('/', colon) == std::string::npos && !is_file(m)) {
      path = m.substr(0, colon);
      alias = m.substr(colon + 1);
    }
    check_model_file(path);
    if (alias.empty()) {
      alias = path.substr(path.find_last_of('/') + 1);
      if (alias.size() > 5 && alias.substr(alias.size() - 5) == ".gguf") alias.resize(alias.size() - 5);
    }
    out.push_back({alias, path, false});
    if (!draft.empty()) out.back().settings.draft = draft;
    if (!mmproj.empty()) out.back().settings.mmproj = mmproj;
  }
  return out;
}

ModelSpec store_model_spec(const StoreModel& m, StoreKind kind, std::vector<std::string>& skipped) {
  ModelSpec spec;
  spec.name = m.name;
  spec.path = m.path;
  spec.settings.aliases = m.aliases;
  if (!m.projector.empty()) spec.settings.mmproj = m.projector;
  if (!m.system.empty()) spec.settings.system = m.system;
  // Ollama's PARAMETER names and the request fields they are.
  static const std::vector<std::pair<const char*, const char*>> kSame = {
      {"stop", "stop"},       {"temperature", "temperature"}, {"top_p", "top_p"},
      {"top_k", "top_k"},     {"min_p", "min_p"},             {"seed", "seed"},
      {"repeat_penalty", "repeat_penalty"}, {"presence_penalty", "presence_penalty"},
      {"frequency_penalty", "frequency_penalty"}, {"num_predict", "max_tokens"}};
  const std::string who = std::string(store_name(kind)) + ": " + m.name + ": ";
  for (const auto& [param, field] : kSame) {
    if (!m.params.contains(param)) continue;
    json value = m.params[param];
    if (std::string(param) == "num_predict" && value.is_number_integer() && value.get<int64_t>() < 0) continue;  // unbounded
    if (const std::string why = request_default_refusal(field, value); !why.empty()) {
      skipped.push_back(who + "parameter " + param + " left out: " + why);
      continue;
    }
    spec.settings.request_defaults[field] = std::move(value);
  }
  if (m.params.contains("num_ctx")) {
    const json& n = m.params["num_ctx"];
    if (n.is_number_integer() && n.get<int64_t>() >= 16 && n.get<int64_t>() <= (1 << 24)) {
      spec.settings.n_ctx = n.get<int32_t>();
    } else {
      skipped.push_back(who + "parameter num_ctx left out: it must be an integer 16.." + std::to_string(1 << 24));
    }
  }
  return spec;
}

ModelSources::ModelSources(SourceArgs a) : a_(std::move(a)), stores_(a_.stores), flags_(models_from_flags(a_.models, a_.draft, a_.mmproj)) {
  now_ = read_changing(nullptr);
  empty_at_start_ = flags_.empty() && now_.folder.empty() && now_.config.empty() && now_.stores.empty();
}

std::string ModelSources::stores_stamp() const {
  std::string s;
  for (const Store& st : stores_) s += store_stamp(st) + "|";
  return s;
}

bool ModelSources::can_grow() const {
  std::lock_guard lock(mu_);
  return !a_.models_dir.empty() || !stores_.empty();
}

void ModelSources::include(const Store& store) {
  std::lock_guard lock(mu_);
  now_.stores_stamp.clear();  // the next rescan reads them
  for (const Store& s : stores_) {
    if (s.kind == store.kind && s.root == store.root) return;
  }
  stores_.push_back(store);
}

ModelSources::Read ModelSources::read_changing(const std::vector<ModelSpec>* config) const {
  Read r;
  // Stamped before they are read, so that a change while they are read
  // changes the stamp again.
  r.folder_stamp = folder_stamp(a_.models_dir);
  r.stores_stamp = stores_stamp();
  r.folder = models_in_folder(a_.models_dir);
  r.config = config ? *config : models_in_config(a_.config);
  // The names the flags, the folder and the file gave, and each store's in turn.
  std::set<std::string> taken;
  using List = const std::vector<ModelSpec>*;
  for (List list : {List(&flags_), List(&r.folder), List(&r.config)}) {
    for (const ModelSpec& m : *list) {
      taken.insert(m.name);
      taken.insert(m.settings.aliases.begin(), m.settings.aliases.end());
    }
  }
  for (const Store& st : stores_) {
    std::vector<std::string> skipped;
    std::vector<StoreModel> found;
    try {
      found = scan_store(st, skipped);
    } catch (const std::exception& e) {  // a folder that cannot be read: the store is skipped, the rest served
      skipped.push_back(std::string(store_name(st.kind)) + ": " + st.root + ": " + e.what());
    }
    for (const StoreModel& m : found) {
      ModelSpec spec = store_model_spec(m, st.kind, skipped);
      try {
        Registry::check_name(spec.name);
      } catch (const std::exception& e) {
        skipped.push_back(std::string(store_name(st.kind)) + ": " + spec.name + ": " + e.what());
        continue;
      }
      if (taken.count(spec.name)) {
        skipped.push_back(std::string(store_name(st.kind)) + ": " + spec.name + ": the name is another model's already");
        continue;
      }
      std::vector<std::string> aliases;
      for (const std::string& alias : spec.settings.aliases) {
        if (taken.insert(alias).second) aliases.push_back(alias);
      }
      spec.settings.aliases = std::move(aliases);
      taken.insert(spec.name);
      r.stores.push_back(std::move(spec));
    }
    for (const std::string& line : skipped) std::fprintf(stderr, "reclaim: --models-from %s\n", line.c_str());
  }
  return r;
}

std::vector<ModelSpec> ModelSources::all() const {
  std::lock_guard lock(mu_);
  return all_locked(now_);
}

std::vector<ModelSpec> ModelSources::all_locked(const Read& r) const {
  std::vector<ModelSpec> out = flags_;
  using List = const std::vector<ModelSpec>*;
  for (List list : {List(&r.folder), List(&r.config), List(&r.stores)}) out.insert(out.end(), list->begin(), list->end());
  if (out.empty()) out.push_back({"test", default_test_model(), false});
  for (const std::string& pin : a_.pins) {
    auto it = std::find_if(out.begin(), out.end(), [&](const ModelSpec& s) { return s.name == pin; });
    if (it == out.end()) throw Error("--pin " + pin + ": no model of that name");
    it->pinned = true;
  }
  return out;
}

Registry::Reconfigured ModelSources::reload(Registry& registry) {
  std::lock_guard lock(mu_);
  Read r = read_changing(nullptr);
  const Registry::Reconfigured done = registry.reconfigure(all_locked(r));
  now_ = std::move(r);
  return done;
}

bool ModelSources::rescan(Registry& registry) {
  std::lock_guard lock(mu_);
  if (a_.models_dir.empty() && stores_.empty()) return false;
  // The stores' stamp walks their folders: at most once a second, however
  // many names nobody has come (a first request for a model just pulled
  // is rarely within a second of another unknown name).
  const auto now = std::chrono::steady_clock::now();
  const bool stores_due = now_.stores_stamp.empty() || now - stores_checked_ >= std::chrono::seconds(1);
  const bool folder_changed = folder_stamp(a_.models_dir) != now_.folder_stamp;
  bool stores_changed = false;
  if (stores_due) {
    stores_checked_ = now;
    stores_changed = stores_stamp() != now_.stores_stamp;
  }
  if (!folder_changed && !stores_changed) return false;
  try {
    Read r = read_changing(&now_.config);  // the file is read again on SIGHUP only
    if (r.folder == now_.folder && r.stores == now_.stores) {
      now_.folder_stamp = r.folder_stamp;
      now_.stores_stamp = r.stores_stamp;
      return false;
    }
    const Registry::Reconfigured done = registry.reconfigure(all_locked(r));
    now_ = std::move(r);
    const char* from = stores_.empty() ? "--models-dir" : a_.models_dir.empty() ? "--models-from" : "--models-dir, --models-from";
    std::fprintf(stderr, "reclaim: %s: %d models added, %d removed\n", from, done.added, done.removed);
    return done.added > 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reclaim: --models-dir, --models-from: %s\n", e.what());
    return false;
  }
}

}  // namespace reclaim::cli
