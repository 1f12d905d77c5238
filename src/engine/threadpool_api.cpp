#include "engine/threadpool_api.h"

#include <ggml-backend.h>

#include "core/error.h"

#ifndef RECLAIM_GGML_BACKEND_DL
#include <ggml-cpu.h>
#endif

namespace reclaim {

namespace {

ThreadpoolApi find() {
  ThreadpoolApi api;
#ifdef RECLAIM_GGML_BACKEND_DL
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!cpu) throw Error("no CPU backend is loaded (is RECLAIM_GGML_BACKEND_DIR the prebuilt llama.cpp folder?)");
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
  api.create = reinterpret_cast<decltype(api.create)>(ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new"));
  api.destroy = reinterpret_cast<decltype(api.destroy)>(ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free"));
  if (!api.create || !api.destroy) throw Error("the CPU backend does not offer ggml_threadpool_new and ggml_threadpool_free");
#else
  api.create = ggml_threadpool_new;
  api.destroy = ggml_threadpool_free;
#endif
  return api;
}

}  // namespace

const ThreadpoolApi& threadpool_api() {
  static const ThreadpoolApi api = find();
  return api;
}

}  // namespace reclaim
