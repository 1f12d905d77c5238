// bench/soak's requests: what one client sends at a time, drawn at random,
// and how each answer is tallied (expected or not, by cause).
#pragma once

#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace reclaim::bench {

// Outcomes by cause, and the times to first token.
class Tally {
 public:
  void add(const std::string& cause, bool expected);
  void ttft(double ms);
  int64_t unexpected() const;
  void print() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> expected_, unexpected_;
  std::vector<double> ttft_;
};

// The served models: three of text (the second, bpe, with fill-in-the-middle
// tokens) and a reranker.
inline const char* kTextModels[] = {"a", "b", "c"};
inline const char* kReranker = "r";

// One request drawn with `rng`, its outcome added to `tally`. `i` numbers
// it (its prompt says so, and a resumable stream's conversation is named
// by it).
void one_request(int port, int i, std::mt19937& rng, Tally& tally);

}  // namespace reclaim::bench
