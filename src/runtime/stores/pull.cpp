#include "runtime/stores/pull.h"

#include <fcntl.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "core/size.h"
#include "runtime/stores/model_stores.h"

namespace reclaim {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxManifest = 1 << 20;
// A layer's declared size and the layers of a model, bounded, so that their
// sum cannot overflow (1,000 of 1 PiB is under 2^63).
constexpr int64_t kMaxLayer = 1ll << 50;
constexpr size_t kMaxLayers = 1000;
constexpr const char* kManifestType = "application/vnd.docker.distribution.manifest.v2+json";
// Room kept free beyond the model's bytes: a disk filled to the last block
// fails whatever writes next.
constexpr int64_t kDiskMargin = 64ll << 20;
// How long a partial blob waits for a pull to go on from it: a week, then
// the next pull or delete in the store removes it.
constexpr auto kKeepPartial = std::chrono::hours(24 * 7);

bool name_part_ok(const std::string& p, bool host) {
  if (p.empty() || p.size() > 128 || p == "." || p == "..") return false;
  return std::all_of(p.begin(), p.end(), [host](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || (host && c == ':');
  });
}

std::string hex_digest(const std::string& digest) {  // "sha256:HEX" -> HEX, or ""
  if (digest.size() != 7 + 64 || digest.compare(0, 7, "sha256:") != 0) return "";
  const std::string hex = digest.substr(7);
  const bool ok = std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  return ok ? hex : "";
}

struct Layer {
  std::string media_type, digest, hex;
  int64_t size = 0;
};

struct Sha256 {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
  Sha256() { EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr); }
  void add(const char* data, size_t n) { EVP_DigestUpdate(ctx.get(), data, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &n);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < n; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }
};

// Whether a transfer still moves: at least kMinStallBytes each window of
// PullOptions::stall (the read timeout only catches a silence).
class StallWatch {
 public:
  explicit StallWatch(std::chrono::seconds window) : window_(window), since_(std::chrono::steady_clock::now()) {}
  // `n` bytes came; false: the window ended with too few.
  bool moving(size_t n) {
    bytes_ += static_cast<int64_t>(n);
    const auto now = std::chrono::steady_clock::now();
    if (now - since_ < window_) return true;
    const bool enough = bytes_ >= kMinStallBytes;
    since_ = now;
    bytes_ = 0;
    return enough;
  }

 private:
  const std::chrono::seconds window_;
  std::chrono::steady_clock::time_point since_;
  int64_t bytes_ = 0;
};

void mkdirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw PullError(PullError::Kind::disk, "cannot create '" + dir + "': " + ec.message());
}

// The store's lock across processes (a command's pull beside a server's): a
// pull holds it shared from its look at the blobs it has to its manifest,
// so that no prune or delete removes a blob it counts on meanwhile; a prune
// or a delete holds it alone.
class StoreLock {
 public:
  explicit StoreLock(const std::string& store) {
    mkdirs(store);
    const std::string path = store + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw PullError(PullError::Kind::disk, "cannot open '" + path + "': " + std::strerror(errno));
  }
  ~StoreLock() { ::close(fd_); }
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

  void shared() { (void)take(LOCK_SH); }
  // Alone, once every pull in another process has written its manifest.
  void alone() { (void)take(LOCK_EX); }
  // Alone, or false at once where a pull holds it (its blobs are left).
  bool alone_now() { return take(LOCK_EX | LOCK_NB); }

 private:
  bool take(int how) {
    while (::flock(fd_, how) != 0) {
      if (errno == EWOULDBLOCK) return false;
      if (errno != EINTR) throw PullError(PullError::Kind::disk, std::string("cannot lock the store: ") + std::strerror(errno));
    }
    return true;
  }
  int fd_ = -1;
};

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
}

class Registry {
 public:
  Registry(const PullName& n, const PullOptions& o)
      : name_(n), options_(o), base_(std::string(o.insecure ? "http://" : "https://") + n.host), client_(base_) {
    client_.set_connection_timeout(10, 0);
    client_.set_read_timeout(60, 0);
    client_.set_follow_location(true);  // a blob is served from another host (a CDN)
    client_.enable_server_certificate_verification(true);
  }

  std::vector<Layer> manifest(std::string& text) {
    const std::string path = "/v2/" + name_.ns + "/" + name_.model + "/manifests/" + name_.tag;
    // Read up to its bound, whatever a registry sends.
    std::string body;
    bool too_large = false, stopped = false, stalled = false;
    int status = 0;
    StallWatch watch(options_.stall);
    auto r = client_.Get(
        path.c_str(), {{"Accept", kManifestType}, {"User-Agent", "reclaim"}},
        [&](const httplib::Response& res) {
          status = res.status;
          return true;
        },
        [&](const char* data, size_t n) {
          if (body.size() + n > kMaxManifest) {
            too_large = true;
            return false;
          }
          stopped = options_.cancelled && options_.cancelled();
          stalled = !stopped && !watch.moving(n);
          body.append(data, n);
          return !stopped && !stalled;
        });
    if (too_large) throw PullError(PullError::Kind::network, "the manifest of '" + shown() + "' is over 1 MiB");
    if (stopped) throw PullError(PullError::Kind::interrupted, "interrupted while the manifest of '" + shown() + "' came");
    if (stalled) throw stalled_error("the manifest of '" + shown() + "'", "");
    if (!r) throw unreachable(r.error());
    if (status == 404 || status == 401 || status == 403) {
      throw PullError(PullError::Kind::not_found, "'" + shown() + "' is not a model " + name_.host + " has (HTTP " +
                                                      std::to_string(status) + ")");
    }
    if (status != 200) {
      throw PullError(PullError::Kind::network, name_.host + " answered the manifest of '" + shown() + "' with HTTP " +
                                                    std::to_string(status));
    }
    text = std::move(body);
    const json m = json::parse(text, nullptr, false);
    if (!m.is_object() || !m.contains("layers") || !m["layers"].is_array()) {
      throw PullError(PullError::Kind::network, "the manifest of '" + shown() + "' is not a JSON manifest with layers");
    }
    std::vector<Layer> layers;
    auto take = [&](const json& l) {
      Layer x;
      if (!l.is_object() || !l.contains("digest") || !l["digest"].is_string() || !l.contains("size") ||
          !l["size"].is_number_integer() || l["size"].get<int64_t>() < 0) {
        throw PullError(PullError::Kind::network, "the manifest of '" + shown() + "' has a layer without a digest and a size");
      }
      x.digest = l["digest"].get<std::string>();
      x.hex = hex_digest(x.digest);
      if (x.hex.empty()) throw PullError(PullError::Kind::network, "the manifest of '" + shown() + "' has a digest that is not sha256: " + x.digest);
      x.size = l["size"].get<int64_t>();
      if (x.size > kMaxLayer) throw PullError(PullError::Kind::network, "the manifest of '" + shown() + "' has a layer over 1 PiB");
      x.media_type = l.value("mediaType", "");
      layers.push_back(x);
    };
    if (m["layers"].size() > kMaxLayers) {
      throw PullError(PullError::Kind::network, "the manifest of '" + shown() + "' has more than " + std::to_string(kMaxLayers) + " layers");
    }
    if (m.contains("config") && m["config"].is_object()) take(m["config"]);
    for (const json& l : m["layers"]) take(l);
    if (std::none_of(layers.begin(), layers.end(), [](const Layer& l) { return l.media_type == "application/vnd.ollama.image.model"; })) {
      throw PullError(PullError::Kind::not_found, "'" + shown() + "' has no GGUF model layer (a safetensors model, which llama.cpp does not load?)");
    }
    return layers;
  }

  // The blob into `final_path`, through `final_path`-partial; continued
  // where a partial file is. Returns the bytes that came over the network.
  int64_t blob(const Layer& l, const std::string& final_path) {
    const std::string partial = final_path + "-partial";
    Sha256 sha;
    // Locked for the transfer: another pull of the same blob (a second
    // command, a server's) would write into the same partial file.
    const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw PullError(PullError::Kind::disk, "cannot write '" + partial + "': " + std::strerror(errno));
    std::FILE* f = ::fdopen(fd, "r+b");
    if (!f) {
      ::close(fd);
      throw PullError(PullError::Kind::disk, "cannot write '" + partial + "': " + std::strerror(errno));
    }
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      throw PullError(PullError::Kind::network, "another pull is fetching " + l.digest + " into " + partial + " now");
    }
    // Another pull finished it between our look and our lock: the partial
    // file this open made is not needed.
    if (file_size(final_path) == l.size) {
      std::remove(partial.c_str());
      return 0;
    }
    int64_t have = std::max<int64_t>(0, file_size(partial));
    if (have > l.size) have = 0;  // not this blob's start
    if (have > 0) {  // what came before, into the digest
      std::vector<char> buf(1 << 20);
      int64_t read = 0;
      while (read < have) {
        const size_t n = std::fread(buf.data(), 1, static_cast<size_t>(std::min<int64_t>(buf.size(), have - read)), f);
        if (n == 0) break;
        sha.add(buf.data(), n);
        read += static_cast<int64_t>(n);
      }
      have = read;
    }
    // Writing goes on from there (a switch from reading to writing needs a seek).
    if (std::fseek(f, have, SEEK_SET) != 0 || ::ftruncate(fd, have) != 0) {
      throw PullError(PullError::Kind::disk, "cannot write '" + partial + "': " + std::strerror(errno));
    }
    report("pulling " + l.hex.substr(0, 12), l, have);
    int64_t fetched = 0;
    if (have < l.size) {
      httplib::Headers h = {{"User-Agent", "reclaim"}};
      if (have > 0) h.emplace("Range", "bytes=" + std::to_string(have) + "-");
      const std::string path = "/v2/" + name_.ns + "/" + name_.model + "/blobs/" + l.digest;
      int status = 0;
      bool stopped = false, stalled = false, write_failed = false;
      int write_errno = 0;
      StallWatch watch(options_.stall);
      auto r = client_.Get(
          path.c_str(), h,
          [&](const httplib::Response& res) {
            status = res.status;
            if (status == 200 && have > 0) {  // the server sends the whole blob: start again
              have = 0;
              sha = Sha256();
              if (std::fseek(f, 0, SEEK_SET) != 0 || ::ftruncate(::fileno(f), 0) != 0) return false;
            }
            return status == 200 || status == 206;
          },
          [&](const char* data, size_t n) {
            if (options_.cancelled && options_.cancelled()) {
              stopped = true;
              return false;
            }
            if (std::fwrite(data, 1, n, f) != n) {
              write_failed = true;
              write_errno = errno;
              return false;
            }
            sha.add(data, n);
            have += static_cast<int64_t>(n);
            fetched += static_cast<int64_t>(n);
            report("pulling " + l.hex.substr(0, 12), l, have);
            stalled = have < l.size && !watch.moving(n);  // the last bytes end it, slow or not
            return have <= l.size && !stalled;
          });
      if (std::fflush(f) != 0 && !write_failed) {
        write_failed = true;
        write_errno = errno;
      }
      if (write_failed) {
        throw PullError(PullError::Kind::disk, "cannot write '" + partial + "': " + std::strerror(write_errno) + " (" +
                                                   format_bytes(have) + " of " + format_bytes(l.size) + " kept; pull again to go on)");
      }
      if (stopped) {
        throw PullError(PullError::Kind::interrupted, "interrupted: " + format_bytes(have) + " of " + format_bytes(l.size) +
                                                          " of " + l.digest + " kept; pull again to go on");
      }
      if (stalled) {
        throw stalled_error(l.digest, " (" + format_bytes(have) + " of " + format_bytes(l.size) + " kept; pull again to go on)");
      }
      if (status == 404) throw PullError(PullError::Kind::not_found, name_.host + " has no blob " + l.digest);
      if (status == 416) {
        // The registry has no bytes past what is kept: the part kept is not
        // of the blob the manifest names, and cannot be continued.
        std::remove(partial.c_str());  // under the lock, as every change to the file
        throw PullError(PullError::Kind::network, name_.host + " has no bytes of " + l.digest + " past the " + format_bytes(have) +
                                                      " kept (HTTP 416): they are removed; pull again to start it over");
      }
      if (status != 0 && status != 200 && status != 206) {
        throw PullError(PullError::Kind::network, name_.host + " answered blob " + l.digest + " with HTTP " + std::to_string(status));
      }
      if (!r || have < l.size) {
        throw PullError(PullError::Kind::network,
                        "the transfer of " + l.digest + " stopped at " + format_bytes(have) + " of " + format_bytes(l.size) +
                            (r ? "" : std::string(" (") + httplib::to_string(r.error()) + ")") + "; pull again to go on from there");
      }
    }
    report("verifying sha256 digest", l, have);
    if (have != l.size || sha.hex() != l.hex) {
      std::remove(partial.c_str());  // wrong bytes cannot be continued
      throw PullError(PullError::Kind::checksum, "blob " + l.digest + " came with other bytes (" + format_bytes(have) +
                                                     ", a different sha256): refused and removed");
    }
    if (::fsync(::fileno(f)) != 0) throw PullError(PullError::Kind::disk, "cannot write '" + partial + "': " + std::strerror(errno));
    // Renamed while still locked: a pull of the same blob in another process
    // that waited for the lock finds the blob in place, not a partial file
    // it would fetch again into a name about to go.
    if (std::rename(partial.c_str(), final_path.c_str()) != 0) {
      throw PullError(PullError::Kind::disk, "cannot rename '" + partial + "': " + std::strerror(errno));
    }
    return fetched;
  }

  std::string shown() const { return name_.host + "/" + name_.ns + "/" + name_.model + ":" + name_.tag; }

 private:
  PullError stalled_error(const std::string& what, const std::string& after) const {
    return PullError(PullError::Kind::network, name_.host + " sent " + what + " at under " + format_bytes(kMinStallBytes) +
                                                   " in " + std::to_string(options_.stall.count()) + " s: dropped as stalled" + after);
  }

  PullError unreachable(httplib::Error e) const {
    const bool cert = e == httplib::Error::SSLServerVerification;
    return PullError(PullError::Kind::network, "cannot reach " + base_ + ": " + httplib::to_string(e) +
                                                   (cert ? " (its certificate is signed by no authority this machine knows)" : ""));
  }

  void report(const std::string& status, const Layer& l, int64_t completed) const {
    if (options_.progress) options_.progress({status, l.digest, l.size, completed});
  }

  const PullName& name_;
  const PullOptions& options_;
  const std::string base_;
  httplib::Client client_;
};

void write_atomically(const std::string& path, const std::string& text) {
  mkdirs(fs::path(path).parent_path().string());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw PullError(PullError::Kind::disk, "cannot write '" + tmp + "': " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw PullError(PullError::Kind::disk, "cannot write '" + path + "': " + std::strerror(errno));
  }
}

// The blobs a manifest's text names, by their hex digests.
std::set<std::string> digests_of(const std::string& text) {
  std::set<std::string> out;
  const json m = json::parse(text, nullptr, false);
  if (!m.is_object()) return out;
  auto add = [&](const json& l) {
    if (l.is_object() && l.contains("digest") && l["digest"].is_string()) out.insert(hex_digest(l["digest"].get<std::string>()));
  };
  if (m.contains("config")) add(m["config"]);
  if (m.contains("layers") && m["layers"].is_array()) {
    for (const json& l : m["layers"]) add(l);
  }
  out.erase("");
  return out;
}

// Removes each whole blob of `store` that no manifest in it names: a
// deleted model's, a tag's old model's, one a crash left between its rename
// and its manifest. None where a manifest cannot be read: its blobs may be
// among them. And each partial blob left for kKeepPartial: a pull given up
// on. With the store's lock held alone, so that no pull is writing one.
void remove_unnamed_blobs(const std::string& store) {
  std::set<std::string> candidates;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(store + "/blobs", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();  // sha256-HEX, or sha256-HEX-partial
    if (name.rfind("sha256-", 0) != 0) continue;
    const std::string rest = name.substr(7);
    if (rest.size() == 64) {
      candidates.insert(rest);
    } else if (rest.size() == 64 + 8 && rest.compare(64, 8, "-partial") == 0) {
      std::error_code age;
      if (now - fs::last_write_time(it->path(), age) > kKeepPartial && !age) fs::remove(it->path(), age);
    }
  }
  if (candidates.empty()) return;
  for (fs::recursive_directory_iterator it(store + "/manifests", ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    try {
      for (const std::string& d : digests_of(stores::read_small_file(it->path().string(), kMaxManifest))) candidates.erase(d);
    } catch (const std::exception&) {
      return;
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory) return;
  for (const std::string& d : candidates) std::remove((store + "/blobs/sha256-" + d).c_str());
}

}  // namespace

PullName parse_pull_name(const std::string& name, bool hf_short_names) {
  auto bad = [&](const std::string& why) -> PullName {
    throw PullError(PullError::Kind::bad_name, "'" + name + "' is not a model name: " + why +
                                                   " (qwen2.5:7b, ORG/REPO:QUANT, hf.co/ORG/REPO:QUANT, HOST/NS/MODEL:TAG)");
  };
  PullName n;
  std::string rest = name;
  const size_t slash = rest.rfind('/');
  const size_t colon = rest.rfind(':');
  n.tag = "latest";
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    n.tag = rest.substr(colon + 1);
    rest.resize(colon);
  }
  std::vector<std::string> parts;
  for (size_t at = 0; at <= rest.size();) {
    const size_t next = std::min(rest.find('/', at), rest.size());
    parts.push_back(rest.substr(at, next - at));
    at = next + 1;
  }
  if (parts.size() == 1) {
    n.host = "registry.ollama.ai";
    n.ns = "library";
    n.model = parts[0];
  } else if (parts.size() == 2) {  // Hugging Face's ORG/REPO, or Ollama's NS/MODEL
    n.host = hf_short_names ? "hf.co" : "registry.ollama.ai";
    n.ns = parts[0];
    n.model = parts[1];
  } else if (parts.size() == 3) {
    n.host = parts[0] == "huggingface.co" ? "hf.co" : parts[0];
    n.ns = parts[1];
    n.model = parts[2];
  } else {
    return bad("it has more than three parts");
  }
  if (!name_part_ok(n.host, true) || !name_part_ok(n.ns, false) || !name_part_ok(n.model, false) || !name_part_ok(n.tag, false)) {
    return bad("each part is letters, digits, '.', '-' and '_'");
  }
  return n;
}

std::string pulled_store_root() {
  if (const char* e = std::getenv("RECLAIM_MODELS"); e && *e) return e;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/reclaim/models";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/share/reclaim/models";
  return "/tmp/reclaim-models";
}

PullResult pull_model(const std::string& name, const PullOptions& options) {
  const PullName n = parse_pull_name(name, options.hf_short_names);
  Registry registry(n, options);
  if (options.progress) options.progress({"pulling manifest", "", 0, 0});
  std::string text;
  const std::vector<Layer> layers = registry.manifest(text);
  const std::string blobs = options.store + "/blobs";
  mkdirs(blobs);
  StoreLock store_lock(options.store);
  store_lock.shared();
  PullResult out;
  int64_t needed = 0;
  std::set<std::string> seen;
  for (const Layer& l : layers) {
    out.bytes += l.size;
    const std::string path = blobs + "/sha256-" + l.hex;
    if (seen.insert(l.hex).second && file_size(path) != l.size) needed += l.size - std::max<int64_t>(0, file_size(path + "-partial"));
  }
  struct statvfs vfs {};
  if (::statvfs(blobs.c_str(), &vfs) == 0) {
    const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    if (needed + kDiskMargin > free_bytes) {
      throw PullError(PullError::Kind::disk, "'" + registry.shown() + "' needs " + format_bytes(needed) + " more, and " +
                                                 options.store + " has " + format_bytes(free_bytes) + " free");
    }
  }
  for (const Layer& l : layers) {
    const std::string path = blobs + "/sha256-" + l.hex;
    if (file_size(path) == l.size) continue;  // already here, whole (renamed only once checked)
    out.fetched += registry.blob(l, path);
  }
  if (options.progress) options.progress({"writing manifest", "", 0, 0});
  out.manifest = options.store + "/manifests/" + n.manifest_path();
  write_atomically(out.manifest, text);
  // The blobs no manifest names now go: a tag pulled again each week would
  // keep every week's model otherwise. Where another process's pull is under
  // way, its manifest may not name its blobs yet: they stay, for the next
  // pull or delete.
  if (store_lock.alone_now()) remove_unnamed_blobs(options.store);
  if (options.progress) options.progress({"success", "", 0, 0});
  return out;
}

bool delete_pulled(const std::string& store, const std::string& name, bool hf_short_names) {
  const PullName n = parse_pull_name(name, hf_short_names);
  const std::string manifest = store + "/manifests/" + n.manifest_path();
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) return false;
  StoreLock store_lock(store);
  store_lock.alone();
  if (std::remove(manifest.c_str()) != 0) throw Error("cannot remove '" + manifest + "': " + std::strerror(errno));
  remove_unnamed_blobs(store);
  // The folders the manifest was alone in.
  for (fs::path dir = fs::path(manifest).parent_path(); dir != fs::path(store + "/manifests"); dir = dir.parent_path()) {
    if (!fs::is_empty(dir, ec) || ec) break;
    fs::remove(dir, ec);
  }
  return true;
}

}  // namespace reclaim
