// What a model file is, read from its GGUF header without loading it: what
// a client lists and shows before it picks a model (Ollama's /api/tags and
// /api/show). ggml's own GGUF reader reads it, which fails cleanly on a
// malformed file; nothing of llama.cpp's loader runs.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace reclaim {

struct GgufSummary {
  std::string architecture;  // general.architecture
  std::string name;          // general.name, may be empty
  std::string file_type;     // the quantization, as llama.cpp names it ("Q4_K_M", "F16"); "unknown"
  uint64_t n_params = 0;     // elements of every tensor
  int64_t context_length = 0, embedding_length = 0, block_count = 0;  // 0 where absent
  std::string chat_template;  // tokenizer.chat_template, may be empty
  // The header's scalar values (strings, numbers, booleans) by key, as
  // Ollama's model_info has them; arrays (the vocabulary) are left out.
  nlohmann::json scalars = nlohmann::json::object();
};

// Throws InvalidModelFile when the file cannot be read as GGUF.
GgufSummary gguf_summary(const std::string& path);

// "7.6B", "494.0M", "35.4K": a parameter count as Ollama writes one.
std::string parameter_size(uint64_t n);

}  // namespace reclaim
