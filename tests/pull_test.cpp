// `reclaim pull` against registries on loopback that speak Ollama's and
// Hugging Face's protocol: a pull that serve then serves, a resumed pull, a
// corrupted blob refused, a dropped connection, a redirect to a blob host,
// HTTPS checked against the machine's authorities, a name not there, and a
// pulled model deleted.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "fake_registry.h"
#include "served.h"
#include "store_layouts.h"
#include "temp_path.h"

using namespace reclaim::testing;
using nlohmann::json;

namespace {

std::vector<std::string> files_under(const std::string& root) {
  std::vector<std::string> out;
  if (!std::filesystem::exists(root)) return out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) out.push_back(std::filesystem::relative(e.path(), root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Where a pulled store keeps the blob of these bytes.
std::string blob_in(const std::string& store, const std::string& bytes) { return store + "/blobs/sha256-" + sha256_hex(bytes); }

bool any_partial(const std::string& root) {
  for (const std::string& f : files_under(root)) {
    if (f.find("-partial") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST(Pull, AModelPulledIsServedUnderItsNameAndDeletedWithItsBlobs) {
  FakeRegistry reg;
  const std::string model = read_bytes(spm());
  reg.add_model("library/tiny:latest", {{"model", model}, {"params", R"({"num_predict":3})"}, {"system", "Be brief."}});
  const std::string store = temp_path("pulled");
  const Result r = run("pull --insecure --store " + store + " " + reg.host() + "/library/tiny");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("pulled '" + reg.host() + "/library/tiny'"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(store + "/manifests/" + reg.host() + "/library/tiny/latest"));
  EXPECT_EQ(read_bytes(blob_in(store, model)), model);
  EXPECT_FALSE(any_partial(store));
  // Not a terminal: plain lines, the last at 100%.
  EXPECT_NE(r.out.find("100%"), std::string::npos) << r.out;
  // Again: nothing to fetch.
  const Result again = run("pull --insecure --store " + store + " " + reg.host() + "/library/tiny");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("(0 B fetched)"), std::string::npos) << again.out;

  {
    ::setenv("RECLAIM_MODELS", store.c_str(), 1);
    Served s({"--models-from", "pulled"}, false);
    const std::string name = reg.host() + "/library/tiny:latest";
    const json reply = s.post_json("/v1/chat/completions",
                                   {{"model", name}, {"temperature", 0}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
    EXPECT_EQ(reply["usage"]["completion_tokens"], 3) << reply.dump();  // its params' num_predict
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "length") << reply.dump();
    s.post("/v1/models/unload", {{"model", name}});
    s.expect_clean();
  }

  const Result del = run("pull --delete --store " + store + " " + reg.host() + "/library/tiny");
  ASSERT_EQ(del.status, 0) << del.out;
  EXPECT_EQ(files_under(store + "/blobs"), std::vector<std::string>{}) << "every blob was only this model's";
  EXPECT_EQ(run("pull --delete --store " + store + " " + reg.host() + "/library/tiny").status, 2);
}

TEST(Pull, ADroppedTransferIsContinuedWhereItStoppedAndBadBytesAreRefused) {
  FakeRegistry reg;
  const std::string model = read_bytes(bpe());
  reg.add_model("library/tiny:q8", {{"model", model}});
  const std::string store = temp_path("pulled-resume"), name = reg.host() + "/library/tiny:q8";

  reg.set_mode(FakeRegistry::Mode::drop_halfway);
  const Result dropped = run("pull --insecure --store " + store + " " + name);
  EXPECT_EQ(dropped.status, 1) << dropped.out;
  EXPECT_NE(dropped.out.find("pull again to go on"), std::string::npos) << dropped.out;
  EXPECT_FALSE(std::filesystem::exists(store + "/manifests/" + reg.host() + "/library/tiny/q8")) << "nothing half-written is served";
  // The first blob (the config's) stopped halfway and is kept.
  std::string partial;
  for (const std::string& f : files_under(store)) {
    if (f.find("-partial") != std::string::npos) partial = store + "/" + f;
  }
  ASSERT_FALSE(partial.empty()) << dropped.out;
  const auto kept = std::filesystem::file_size(partial);
  EXPECT_GT(kept, 0u);

  reg.set_mode(FakeRegistry::Mode::normal);
  const Result resumed = run("pull --insecure --store " + store + " " + name);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_EQ(read_bytes(blob_in(store, model)), model);
  ASSERT_FALSE(reg.ranges().empty());
  EXPECT_EQ(reg.ranges().back(), "bytes=" + std::to_string(kept) + "-");
  EXPECT_FALSE(any_partial(store));

  // Other bytes than the digest names: refused, and nothing of them kept.
  reg.add_model("library/other:latest", {{"model", model + "x"}});
  reg.set_mode(FakeRegistry::Mode::corrupt);
  const std::string store2 = temp_path("pulled-corrupt");
  const Result corrupt = run("pull --insecure --store " + store2 + " " + reg.host() + "/library/other");
  EXPECT_EQ(corrupt.status, 1) << corrupt.out;
  EXPECT_NE(corrupt.out.find("other bytes"), std::string::npos) << corrupt.out;
  for (const std::string& f : files_under(store2)) {
    EXPECT_EQ(f.find("manifests"), std::string::npos) << f;
    EXPECT_EQ(f.find(sha256_hex(model + "x")), std::string::npos) << f;
  }

  // A disk that takes no more (a file size limit: the same failed write as a
  // full disk's): the error says so, the part written is kept, no manifest.
  reg.set_mode(FakeRegistry::Mode::normal);
  const std::string store3 = temp_path("pulled-full");
  const std::string sh = "sh -c \"ulimit -f 4; trap '' XFSZ; exec " + std::string(RECLAIM_BIN) + " pull --insecure --store " +
                         store3 + " " + name + "\" 2>&1";
  std::FILE* p = ::popen(sh.c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(exit_code(::pclose(p)), 1) << out;
  EXPECT_NE(out.find("cannot write"), std::string::npos) << out;
  EXPECT_NE(out.find("pull again to go on"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(store3 + "/manifests"));

  // A name the registry does not have; a name that is not one.
  reg.set_mode(FakeRegistry::Mode::normal);
  const Result missing = run("pull --insecure --store " + store + " " + reg.host() + "/library/nope:1b");
  EXPECT_EQ(missing.status, 2) << missing.out;
  EXPECT_NE(missing.out.find("is not a model"), std::string::npos) << missing.out;
  const Result bad = run("pull --store " + store + " 'a/b/c/d:e'");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("not a model name"), std::string::npos) << bad.out;
  const Result unreachable = run("pull --insecure --store " + store + " 127.0.0.1:1/library/tiny");
  EXPECT_EQ(unreachable.status, 1) << unreachable.out;
  EXPECT_NE(unreachable.out.find("cannot reach"), std::string::npos) << unreachable.out;
}

TEST(Pull, BlobsRedirectedToAnotherHostAndHttpsCheckedAgainstTheAuthorities) {
  FakeRegistry reg, cdn;
  const std::string model = read_bytes(spm());
  reg.add_model("org/repo:Q8_0", {{"model", model}});
  reg.share_blobs_with(cdn);
  reg.redirect_blobs_to(&cdn);
  reg.set_mode(FakeRegistry::Mode::redirect);
  const std::string store = temp_path("pulled-redirect");
  const Result r = run("pull --insecure --store " + store + " " + reg.host() + "/org/repo:Q8_0");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_bytes(blob_in(store, model)), model);

  // HTTPS: a certificate no authority signed is refused; trusted (as the
  // system's authorities are, through SSL_CERT_FILE), it is taken.
  const std::string cert = temp_path("registry-cert.pem"), key = temp_path("registry-key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext "
                          "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + key + " -out " + cert + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  FakeRegistry tls(cert, key);
  tls.add_model("library/tiny:latest", {{"model", model}});
  const std::string tls_store = temp_path("pulled-tls"), name = "localhost:" + std::to_string(tls.port()) + "/library/tiny";
  const Result untrusted = run("pull --store " + tls_store + " " + name);
  EXPECT_EQ(untrusted.status, 1) << untrusted.out;
  EXPECT_NE(untrusted.out.find("certificate"), std::string::npos) << untrusted.out;
  const Result ok = run_with_env("SSL_CERT_FILE=" + cert, "pull --store " + tls_store + " " + name);
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_EQ(read_bytes(blob_in(tls_store, model)), model);
}

// Ollama's POST /api/pull as ollama-js's pull() reads it (its progress, a
// line at a time), the model served at once after, DELETE /api/delete.
TEST(Pull, OllamaJsPullsThroughTheServerWithItsProgressAndDeletes) {
  const std::string client = RECLAIM_OLLAMA_CLIENT;
  ASSERT_FALSE(client.empty()) << "built without RECLAIM_OLLAMA_CLIENT: run scripts/setup";
  FakeRegistry reg;
  const std::string model = read_bytes(spm());
  reg.add_model("library/tiny:latest", {{"model", model}});
  const std::string store = temp_path("pulled-api");
  ::setenv("RECLAIM_MODELS", store.c_str(), 1);
  Served s({"-m", bpe() + ":bpe", "--allow-insecure-pull"}, false);
  const std::string name = reg.host() + "/library/tiny:latest";
  int status = 0;
  const std::string out = run_node_script(RECLAIM_OLLAMA_PULL_SCRIPT,
                                          client + " http://127.0.0.1:" + std::to_string(s.port()) + " " + name, status);
  ASSERT_EQ(status, 0) << out << "\nserver: " << s.log();
  const json r = json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(r.is_discarded()) << out;
  EXPECT_EQ(r["statuses"].front(), "pulling manifest") << out;
  EXPECT_EQ(r["statuses"].back(), "success") << out;
  const json layer = r["layers"]["sha256:" + sha256_hex(model)];
  EXPECT_EQ(layer["total"], model.size()) << out;
  EXPECT_EQ(layer["completed"], model.size()) << out;
  EXPECT_EQ(r["chat"]["done"], true) << out;
  EXPECT_EQ(r["listed"], true) << out;
  EXPECT_EQ(r["deleted"], "success") << out;
  EXPECT_EQ(r["missing"]["status"], 404) << out;
  EXPECT_FALSE(std::filesystem::exists(store + "/manifests/" + reg.host() + "/library/tiny/latest"));
  EXPECT_EQ(files_under(store + "/blobs"), std::vector<std::string>{});
  // Refused before a stream starts: a name that is not one.
  auto bad = s.post("/api/pull", {{"model", "a/b/c/d"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  {
    // Plain HTTP only where the operator allows it.
    Served strict({"-m", bpe() + ":bpe"}, false);
    auto refused = strict.post("/api/pull", {{"model", name}, {"insecure", true}});
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400) << refused->body;
    EXPECT_NE(json::parse(refused->body).value("error", "").find("--allow-insecure-pull"), std::string::npos) << refused->body;
    strict.expect_clean();
  }
  s.expect_clean();
}

// A pull in another process holds the store shared until its manifest is
// written: a pull here then leaves the blobs no manifest names (that pull's
// may be among them), and the next one, alone, removes them.
TEST(Pull, BlobsNoManifestNamesGoOnlyWhenNoOtherPullIsUnderWay) {
  FakeRegistry reg;
  const std::string old_model = read_bytes(spm()), new_model = read_bytes(bpe());
  reg.add_model("library/tiny:latest", {{"model", old_model}});
  const std::string store = temp_path("pulled-shared"), name = reg.host() + "/library/tiny";
  ASSERT_EQ(run("pull --insecure --store " + store + " " + name).status, 0);
  const int other = ::open((store + "/.lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::flock(other, LOCK_SH), 0);  // as another process's pull holds it
  reg.add_model("library/tiny:latest", {{"model", new_model}});
  ASSERT_EQ(run("pull --insecure --store " + store + " " + name).status, 0);
  EXPECT_TRUE(std::filesystem::exists(blob_in(store, old_model))) << "removed under another pull";
  ::close(other);
  // And a partial blob left a week ago (a pull given up on) goes with them;
  // one of today stays, for a pull to go on from.
  namespace fs = std::filesystem;
  const std::string stale = store + "/blobs/sha256-" + std::string(64, 'a') + "-partial";
  const std::string fresh = store + "/blobs/sha256-" + std::string(64, 'b') + "-partial";
  for (const std::string& p : {stale, fresh}) std::ofstream(p) << "part";
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(24 * 8));
  ASSERT_EQ(run("pull --insecure --store " + store + " " + name).status, 0);
  EXPECT_FALSE(fs::exists(blob_in(store, old_model)));
  EXPECT_TRUE(fs::exists(blob_in(store, new_model)));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));
}

// A registry that trickles (1 KiB every 100 ms, never silent long enough
// for a read timeout) is dropped once a window brings under 64 KiB, what
// came kept; one that has fewer bytes than its manifest says answers the
// next pull's range with 416, and the part kept goes.
TEST(Pull, ATricklingRegistryIsDroppedAsStalledAndABlobShorterThanDeclaredIsNotKept) {
  FakeRegistry reg;
  const std::string model = read_bytes(spm());
  reg.add_model("library/tiny:latest", {{"model", model}});
  const std::string store = temp_path("pulled-stall"), name = reg.host() + "/library/tiny";
  reg.set_mode(FakeRegistry::Mode::trickle);
  const Result stalled = run("pull --insecure --stall-seconds 2 --store " + store + " " + name);
  EXPECT_EQ(stalled.status, 1) << stalled.out;
  EXPECT_NE(stalled.out.find("dropped as stalled"), std::string::npos) << stalled.out;
  EXPECT_NE(stalled.out.find("pull again to go on"), std::string::npos) << stalled.out;
  EXPECT_TRUE(any_partial(store));
  reg.set_mode(FakeRegistry::Mode::normal);
  const Result resumed = run("pull --insecure --store " + store + " " + name);
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_EQ(read_bytes(blob_in(store, model)), model);
  EXPECT_FALSE(any_partial(store));

  // Declared 10 bytes longer than it is.
  const std::string config = R"({"model_format":"gguf"})", blob = "GGUF-but-short";
  reg.add_model("library/short:latest", {{"model", blob}});  // serves the blob and the config
  const json manifest = {{"schemaVersion", 2},
                         {"config", {{"mediaType", "application/vnd.docker.container.image.v1+json"},
                                     {"digest", "sha256:" + sha256_hex(config)}, {"size", config.size()}}},
                         {"layers", {{{"mediaType", "application/vnd.ollama.image.model"},
                                      {"digest", "sha256:" + sha256_hex(blob)}, {"size", blob.size() + 10}}}}};
  reg.add_manifest("library/short:latest", manifest.dump());
  const std::string short_store = temp_path("pulled-short");
  const Result first = run("pull --insecure --store " + short_store + " " + reg.host() + "/library/short");
  EXPECT_EQ(first.status, 1) << first.out;
  EXPECT_TRUE(any_partial(short_store)) << first.out;
  const Result second = run("pull --insecure --store " + short_store + " " + reg.host() + "/library/short");
  EXPECT_EQ(second.status, 1) << second.out;
  EXPECT_NE(second.out.find("HTTP 416"), std::string::npos) << second.out;
  EXPECT_FALSE(any_partial(short_store)) << "a part that cannot be continued is kept";
}

// A tag pulled again after its model changed keeps only the new model's
// blobs: the old ones no manifest names go with the old manifest.
TEST(Pull, ATagPulledAgainLeavesNoBlobOfItsOldModel) {
  FakeRegistry reg;
  const std::string old_model = read_bytes(spm()), new_model = read_bytes(bpe());
  reg.add_model("library/tiny:latest", {{"model", old_model}});
  reg.add_model("library/keep:latest", {{"model", old_model}});  // another tag of the same bytes
  const std::string store = temp_path("pulled-again"), name = reg.host() + "/library/tiny";
  ASSERT_EQ(run("pull --insecure --store " + store + " " + name).status, 0);
  ASSERT_EQ(run("pull --insecure --store " + store + " " + reg.host() + "/library/keep").status, 0);
  reg.add_model("library/tiny:latest", {{"model", new_model}});
  ASSERT_EQ(run("pull --insecure --store " + store + " " + name).status, 0);
  EXPECT_TRUE(std::filesystem::exists(blob_in(store, old_model))) << "named by library/keep";
  EXPECT_TRUE(std::filesystem::exists(blob_in(store, new_model)));
  ASSERT_EQ(run("pull --delete --store " + store + " " + reg.host() + "/library/keep").status, 0);
  reg.add_model("library/tiny:latest", {{"model", old_model}});
  ASSERT_EQ(run("pull --insecure --store " + store + " " + name).status, 0);
  EXPECT_FALSE(std::filesystem::exists(blob_in(store, new_model))) << "the replaced model's blob stays";
  EXPECT_TRUE(std::filesystem::exists(blob_in(store, old_model)));
}

// Ctrl-C in the middle of a blob: exit 130, the partial file kept for the
// next pull and nothing else; and a model larger than the disk's room is
// refused before a byte is fetched.
TEST(Pull, CtrlCKeepsAResumablePartAndAModelTooLargeForTheDiskIsRefusedFirst) {
  FakeRegistry reg;
  const std::string model = read_bytes(spm());
  ASSERT_GT(model.size(), 4u << 20) << "a transfer of seconds at 800 KiB/s";
  reg.add_model("library/tiny:latest", {{"model", model}});
  const std::string store = temp_path("pulled-interrupted");
  // The config blob whole first, then the model's, slowly.
  ASSERT_EQ(run("pull --insecure --store " + store + " " + reg.host() + "/library/tiny").status, 0);
  const std::string blob = blob_in(store, model);
  std::filesystem::remove(blob);
  std::filesystem::remove_all(store + "/manifests");
  reg.set_mode(FakeRegistry::Mode::slow);
  Child pull({"pull", "--insecure", "--store", store, reg.host() + "/library/tiny"});
  ASSERT_TRUE(pull.wait_for_err("pulling " + sha256_hex(model).substr(0, 12) + " 10%", 60)) << pull.so_far().err;
  pull.signal(SIGINT);
  const Result done = pull.wait();
  EXPECT_EQ(done.status, 130) << done.err;
  EXPECT_NE(done.err.find("interrupted"), std::string::npos) << done.err;
  EXPECT_TRUE(std::filesystem::exists(blob + "-partial"));
  EXPECT_FALSE(std::filesystem::exists(blob));
  EXPECT_FALSE(std::filesystem::exists(store + "/manifests"));
  reg.set_mode(FakeRegistry::Mode::normal);
  ASSERT_EQ(run("pull --insecure --store " + store + " " + reg.host() + "/library/tiny").status, 0);
  EXPECT_EQ(read_bytes(blob), model);

  const std::string huge = R"({"schemaVersion":2,"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:)" +
                           std::string(64, 'a') + R"(","size":1125899906842624}]})";
  reg.add_manifest("library/huge:latest", huge);
  const Result refused = run("pull --insecure --store " + store + " " + reg.host() + "/library/huge");
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_NE(refused.out.find("' needs 1024"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("free"), std::string::npos) << refused.out;
  EXPECT_FALSE(std::filesystem::exists(store + "/blobs/sha256-" + std::string(64, 'a') + "-partial"));
}

namespace {

// GET /models/sse read on a thread of its own: each event's JSON as it comes.
class EventListener {
 public:
  explicit EventListener(int port) : client_("127.0.0.1", port) {
    client_.set_read_timeout(120, 0);
    thread_ = std::thread([this] {
      std::string partial;
      (void)client_.Get(
          "/models/sse",
          [this](const httplib::Response& r) {
            std::lock_guard lock(mu_);
            status_ = r.status;
            return true;
          },
          [this, &partial](const char* data, size_t n) {
            partial.append(data, n);
            for (size_t end; (end = partial.find("\n\n")) != std::string::npos; partial.erase(0, end + 2)) {
              const std::string block = partial.substr(0, end);
              if (block.rfind("data: ", 0) != 0) continue;  // a ping
              std::lock_guard lock(mu_);
              events_.push_back(json::parse(block.substr(6)));
            }
            return true;
          });
    });
  }
  ~EventListener() {
    client_.stop();
    thread_.join();
  }
  bool connected() {
    std::lock_guard lock(mu_);
    return status_ == 200;
  }
  // The first event `name` of `model` whose data matches `pred`, or null.
  json find(const std::string& model, const std::string& name, const std::function<bool(const json&)>& pred = nullptr) {
    std::lock_guard lock(mu_);
    for (const json& e : events_) {
      if (e["model"] == model && e["event"] == name && (!pred || pred(e.value("data", json())))) return e;
    }
    return nullptr;
  }

 private:
  httplib::Client client_;
  std::mutex mu_;
  int status_ = 0;
  std::vector<json> events_;
  std::thread thread_;
};

}  // namespace

// llama-server's router's model API, as its web UI drives it: POST /models
// pulls in the background with its progress and end on GET /models/sse;
// /models/load and /models/unload answer at once and the model's state
// follows on the events and in GET /models' `status`; DELETE /models?model=
// removes what was pulled and nothing else.
TEST(Pull, TheRoutersModelApiPullsLoadsUnloadsAndDeletesWithItsEvents) {
  FakeRegistry reg;
  const std::string model = read_bytes(spm());
  reg.add_model("library/tiny:latest", {{"model", model}});
  const std::string store = temp_path("pulled-router");
  ::setenv("RECLAIM_MODELS", store.c_str(), 1);
  Served s({"-m", bpe() + ":bpe", "--allow-insecure-pull"}, false);
  const std::string name = reg.host() + "/library/tiny:latest";
  auto status_of = [&s](const std::string& id) -> std::string {
    const json list = s.get("/models");
    for (const json& m : list["data"]) {
      if (m["id"] == id) return m["status"]["value"];
    }
    return "absent";
  };
  {
    EventListener events(s.port());
    ASSERT_TRUE(s.until([&] { return events.connected(); }));

    auto pulled = s.post("/models", {{"model", name}, {"insecure", true}});
    ASSERT_TRUE(pulled);
    ASSERT_EQ(pulled->status, 200) << pulled->body;
    EXPECT_EQ(json::parse(pulled->body)["success"], true);
    ASSERT_TRUE(s.until([&] { return !events.find(name, "download_finished").is_null(); }, 60)) << s.log();
    const std::string layer = "sha256:" + sha256_hex(model);
    EXPECT_FALSE(events.find(name, "download_progress", [&](const json& d) {
                         return d["progress"].contains(layer) && d["progress"][layer]["done"] == model.size() &&
                                d["progress"][layer]["total"] == model.size();
                       }).is_null());
    // Served once it is said to be there.
    EXPECT_EQ(status_of(name), "unloaded");
    auto again = s.post("/models", {{"model", name}, {"insecure", true}});
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 400) << again->body;

    auto load = s.post("/models/load", {{"model", name}});
    ASSERT_TRUE(load);
    ASSERT_EQ(load->status, 200) << load->body;
    EXPECT_EQ(json::parse(load->body)["success"], true);
    ASSERT_TRUE(s.until([&] { return status_of(name) == "loaded"; })) << s.log();
    auto has_status = [](const char* v) { return [v](const json& d) { return d["status"] == v; }; };
    ASSERT_TRUE(s.until([&] { return !events.find(name, "status_change", has_status("loaded")).is_null(); }));
    auto twice = s.post("/models/load", {{"model", name}});
    ASSERT_TRUE(twice);
    EXPECT_EQ(twice->status, 400) << twice->body;

    auto unload = s.post("/models/unload", {{"model", name}});
    ASSERT_TRUE(unload);
    ASSERT_EQ(unload->status, 200) << unload->body;
    ASSERT_TRUE(s.until([&] { return status_of(name) == "unloaded"; }));
    ASSERT_TRUE(s.until([&] { return !events.find(name, "status_change", has_status("unloaded")).is_null(); }));
    auto not_loaded = s.post("/models/unload", {{"model", name}});
    ASSERT_TRUE(not_loaded);
    EXPECT_EQ(not_loaded->status, 400) << not_loaded->body;

    // A model the registry does not have: its failure on the events.
    const std::string missing = reg.host() + "/library/missing:latest";
    auto failing = s.post("/models", {{"model", missing}, {"insecure", true}});
    ASSERT_TRUE(failing);
    ASSERT_EQ(failing->status, 200) << failing->body;
    ASSERT_TRUE(s.until([&] { return !events.find(missing, "download_failed").is_null(); }, 60)) << s.log();
    EXPECT_NE(events.find(missing, "download_failed")["data"].value("error", "").find("is not a model"), std::string::npos);
  }

  auto del = s.http().Delete(("/models?model=" + name).c_str());
  ASSERT_TRUE(del);
  ASSERT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(json::parse(del->body)["success"], true);
  EXPECT_EQ(status_of(name), "absent");
  EXPECT_FALSE(std::filesystem::exists(store + "/manifests/" + reg.host() + "/library/tiny/latest"));
  EXPECT_EQ(files_under(store + "/blobs"), std::vector<std::string>{});
  // Gone, not pulled, not named: each refused as what it is.
  auto gone = s.http().Delete(("/models?model=" + name).c_str());
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << gone->body;
  auto mine = s.http().Delete("/models?model=bpe");
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, 400) << mine->body;
  EXPECT_TRUE(std::filesystem::exists(bpe()));
  auto unnamed = s.http().Delete("/models");
  ASSERT_TRUE(unnamed);
  EXPECT_EQ(unnamed->status, 400) << unnamed->body;
  // Plain HTTP only where the operator allows it.
  {
    Served strict({"-m", bpe() + ":bpe"}, false);
    auto refused = strict.post("/models", {{"model", name}, {"insecure", true}});
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400) << refused->body;
    strict.expect_clean();
  }
  s.expect_clean();
}
