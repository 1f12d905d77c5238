// The Hugging Face hub cache: models--ORG--REPO/snapshots/REVISION/FILE,
// where FILE is usually a link into the repository's blobs/, and
// refs/main names the revision the hub last gave. llama.cpp's -hf writes
// the same layout, so a model it downloaded is served under the name it was
// asked for: ORG/REPO:QUANT, the quantization read off the file name as
// -hf reads it. A split model (NAME-00001-of-0000N.gguf, ...) is one model.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "runtime/stores/model_stores.h"

namespace reclaim::stores {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxEntries = 10000;  // files looked at in one snapshot

bool is_file(const std::string& path) {  // follows the link into blobs/
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool is_commit(const std::string& s) {
  return (s.size() == 40 || s.size() == 64) &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The revision to serve: refs/main's, else the newest snapshot.
std::string revision(const fs::path& repo) {
  std::error_code ec;
  try {
    const std::string main = trim(read_small_file((repo / "refs" / "main").string(), 256));
    if (is_commit(main) && fs::is_directory(repo / "snapshots" / main, ec)) return main;
  } catch (const std::exception&) {
    // no refs/main: a snapshot made another way
  }
  std::string newest;
  fs::file_time_type when{};
  for (const auto& s : fs::directory_iterator(repo / "snapshots", ec)) {
    if (!s.is_directory()) continue;
    const fs::file_time_type t = s.last_write_time(ec);
    if (newest.empty() || t > when) {
      newest = s.path().filename().string();
      when = t;
    }
  }
  return newest;
}

struct Candidate {
  std::string rel;  // in the snapshot
  GgufName name;
};

bool contains(const std::string& s, const char* part) {
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find(part) != std::string::npos;
}

int quant_bits(const std::string& tag) {
  const size_t at = tag.find_first_of("0123456789");
  return at == std::string::npos ? 0 : std::atoi(tag.c_str() + at);
}

void scan_repo(const fs::path& repo_dir, const std::string& repo, std::vector<StoreModel>& out,
               std::vector<std::string>& skipped) {
  const std::string rev = revision(repo_dir);
  if (rev.empty()) return;
  const fs::path snap = repo_dir / "snapshots" / rev;
  std::vector<Candidate> models, projectors;
  std::error_code ec;
  size_t seen = 0;
  for (fs::recursive_directory_iterator it(snap, ec), end; !ec && it != end && seen < kMaxEntries; it.increment(ec), ++seen) {
    if (it->is_directory()) continue;
    Candidate c;
    c.rel = it->path().lexically_relative(snap).generic_string();
    if (!parse_gguf_name(it->path().filename().string(), c.name)) continue;
    if (contains(c.rel, "mmproj")) projectors.push_back(c);
    else if (!contains(it->path().filename().string(), "mtp-")) models.push_back(c);  // a draft head, not a model
  }
  std::sort(models.begin(), models.end(), [](const Candidate& a, const Candidate& b) { return a.rel < b.rel; });
  // One model for each split: its first part, once every part is there.
  std::map<std::string, std::vector<int>> parts;
  for (const Candidate& c : models) {
    if (c.name.parts > 1) parts[fs::path(c.rel).parent_path().string() + "/" + c.name.stem].push_back(c.name.part);
  }
  const size_t first = out.size();
  for (const Candidate& c : models) {
    const std::string shown = repo + "/" + c.rel;
    if (c.name.parts > 1) {
      if (c.name.part != 1) continue;
      std::vector<int>& have = parts[fs::path(c.rel).parent_path().string() + "/" + c.name.stem];
      std::sort(have.begin(), have.end());
      if (static_cast<int>(have.size()) != c.name.parts) {
        skipped.push_back("hf: " + shown + ": " + std::to_string(have.size()) + " of its " + std::to_string(c.name.parts) +
                          " parts are in the cache");
        continue;
      }
    }
    const std::string path = (snap / c.rel).string();
    if (!is_file(path)) {
      skipped.push_back("hf: " + shown + ": the file is missing (a download that did not finish?)");
      continue;
    }
    StoreModel s;
    s.name = repo + ":" + (c.name.tag.empty() ? c.name.stem : c.name.tag);
    if (std::any_of(out.begin() + static_cast<long>(first), out.end(), [&](const StoreModel& o) { return o.name == s.name; })) {
      skipped.push_back("hf: " + shown + ": another file of the repository is " + s.name + " already");
      continue;
    }
    s.path = path;
    // The projector nearest the model in its quantization, as -hf picks one.
    int best = -1;
    for (const Candidate& p : projectors) {
      const int diff = std::abs(quant_bits(p.name.tag) - quant_bits(c.name.tag));
      if (best < 0 || diff < best) {
        best = diff;
        s.projector = (snap / p.rel).string();
      }
    }
    out.push_back(std::move(s));
  }
  // A repository of one model answers to its own name too, as -hf without a tag.
  if (out.size() == first + 1) out.back().aliases.push_back(repo);
}

}  // namespace

std::vector<StoreModel> scan_hf(const std::string& root, std::vector<std::string>& skipped) {
  std::vector<StoreModel> out;
  std::vector<std::pair<std::string, fs::path>> repos;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string folder = d.path().filename().string();
    if (!d.is_directory() || folder.rfind("models--", 0) != 0) continue;  // datasets--, spaces--: not models
    std::string repo = folder.substr(8);
    for (size_t at = repo.find("--"); at != std::string::npos; at = repo.find("--", at + 1)) repo.replace(at, 2, "/");
    if (std::count(repo.begin(), repo.end(), '/') != 1 || repo.front() == '/' || repo.back() == '/') continue;
    repos.emplace_back(repo, d.path());
  }
  std::sort(repos.begin(), repos.end());
  for (const auto& [repo, dir] : repos) {
    try {
      scan_repo(dir, repo, out, skipped);
    } catch (const std::exception& e) {
      skipped.push_back("hf: " + repo + ": " + e.what());
    }
  }
  return out;
}

}  // namespace reclaim::stores
