// What a CPU buffer of ggml's takes where src/engine/ggml_buffers.cpp maps
// it (in whole 2 MiB huge pages from 2 MiB up), for estimates that must
// match what the ledger measures.
#pragma once

#include <cstdint>

namespace reclaim {

uint64_t ggml_cpu_buffer_footprint(uint64_t size);

}  // namespace reclaim
