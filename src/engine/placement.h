// Where a context's bytes and its model's are: host memory or an
// accelerator's, as llama.cpp allocated them (its memory breakdown by buffer
// type). The ledger splits entries with it, and budgets count each device
// apart, since host RAM and VRAM are not one pool.
#pragma once

#include <ggml-backend.h>
#include <llama.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/resource.h"

namespace reclaim {

struct Placement {
  uint64_t host = 0;
  std::vector<DeviceBytes> devices;  // by device, in ggml's order
  uint64_t device_total() const;
};

struct ContextPlacement {
  bool known = false;  // false where llama.cpp's breakdown is not built in
  Placement model;     // the weights
  Placement context;   // the KV cache, outputs and compute buffers
  Placement kv;        // of which the KV cache (the prompt cache's cells are in it)
  Placement entry;     // what the context's ledger entry holds (new_context)
};

ContextPlacement placement_of(const llama_context* ctx);

// Where a buffer type's memory is: kHostMemory (a device's pinned host
// buffers too), or the device's place name (engine/devices.h).
std::string place_of(ggml_backend_buffer_type_t buft);

// Whether the CPU backend keeps weights of this buffer type in memory of its
// own even when the model's file is mapped: its extra types (AMX's, the
// repacked layouts) copy the tensors they take out of the mapping in a
// layout of their own.
bool is_cpu_extra_buffer_type(ggml_backend_buffer_type_t buft);
// Those types, null-terminated (ggml's list, made at its first call and kept
// until exit); null where the CPU backend offers none.
ggml_backend_buffer_type_t* cpu_extra_buffer_types();

}  // namespace reclaim
