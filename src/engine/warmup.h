// One-time global state of llama.cpp that reclaim builds at start-up, before
// the baseline, so that the first model's load does not look like a leak.
#pragma once

namespace reclaim {

// llama.cpp's unicode tables (src/unicode.cpp: the code-point flags of all
// 0x110000 code points, 2.2 MiB, and the byte<->UTF-8 maps) are function-local
// statics built by the first BPE tokenization and kept until exit. They are
// built here by loading a 256-token byte-level BPE vocab from memory and
// tokenizing with it. Throws Error if llama.cpp refuses the vocab.
void warm_tokenizer_tables();

// ggml's CPU backend makes its list of extra buffer types (the repack type
// for quantized weights, with its context) on the first call, which the
// first model load makes, and keeps it until exit. Made during a load it
// would also pin that load's arena (core/arena.h), so it is made here.
void warm_cpu_buffer_types();

}  // namespace reclaim
