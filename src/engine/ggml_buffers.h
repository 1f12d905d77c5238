// ggml's CPU buffers as src/engine/ggml_buffers.cpp allocates them: what
// one takes where it is mapped (in whole 2 MiB huge pages from 2 MiB up), for
// estimates that must match what the ledger measures, and what is live.
#pragma once

#include <cstdint>

namespace reclaim {

uint64_t ggml_cpu_buffer_footprint(uint64_t size);

// Bytes of ggml's CPU buffers live now in the process (the sizes ggml asked
// for), such as a model's weights read into memory of their own: a load
// measures the change across it to know which of its tensors its heap holds.
uint64_t ggml_cpu_buffers_live();

}  // namespace reclaim
