// ggml's CPU thread pool, reached wherever the CPU backend lives: linked into
// the program (the default build), or a library dlopen'ed at start-up (the
// prebuilt Vulkan variant), where only the backend registry can name its
// functions.
#pragma once

#include <ggml.h>

namespace reclaim {

struct ThreadpoolApi {
  ggml_threadpool* (*create)(ggml_threadpool_params* params) = nullptr;
  void (*destroy)(ggml_threadpool* pool) = nullptr;
};

// Throws Error when no CPU backend is loaded.
const ThreadpoolApi& threadpool_api();

}  // namespace reclaim
