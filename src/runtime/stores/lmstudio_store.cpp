// LM Studio's folders: models/PUBLISHER/REPO/FILE.gguf, named
// PUBLISHER/REPO/FILE as LM Studio lists them (FILE without ".gguf"). A
// split model is one, by its first part; an mmproj file in the same folder
// is the folder's models' projector.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "runtime/stores/model_stores.h"

namespace reclaim::stores {

namespace fs = std::filesystem;

namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool has_mmproj(const std::string& file) {
  std::string lower = file;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("mmproj") != std::string::npos;
}

}  // namespace

std::vector<StoreModel> scan_lmstudio(const std::string& root, std::vector<std::string>& skipped) {
  std::vector<StoreModel> out;
  std::error_code ec;
  std::vector<fs::path> folders;
  for (const auto& pub : fs::directory_iterator(root, ec)) {
    if (!pub.is_directory()) continue;
    for (const auto& repo : fs::directory_iterator(pub.path(), ec)) {
      if (repo.is_directory()) folders.push_back(repo.path());
    }
  }
  std::sort(folders.begin(), folders.end());
  for (const fs::path& folder : folders) {
    std::vector<std::pair<std::string, GgufName>> files;
    std::string projector;
    for (const auto& f : fs::directory_iterator(folder, ec)) {
      GgufName n;
      const std::string file = f.path().filename().string();
      if (!parse_gguf_name(file, n)) continue;
      if (has_mmproj(file)) projector = f.path().string();
      else files.emplace_back(file, n);
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::string prefix = folder.parent_path().filename().string() + "/" + folder.filename().string() + "/";
    for (const auto& [file, n] : files) {
      if (n.part != 1) continue;
      if (n.parts > 1) {
        const long have = std::count_if(files.begin(), files.end(), [&](const auto& o) {
          return o.second.stem == n.stem && o.second.parts == n.parts;
        });
        if (have != n.parts) {
          skipped.push_back("lmstudio: " + prefix + file + ": " + std::to_string(have) + " of its " + std::to_string(n.parts) +
                            " parts are in the folder");
          continue;
        }
      }
      const std::string path = (folder / file).string();
      if (!is_file(path)) continue;
      StoreModel s;
      s.name = prefix + (n.parts > 1 ? n.stem : file.substr(0, file.size() - 5));
      s.path = path;
      s.projector = projector;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace reclaim::stores
