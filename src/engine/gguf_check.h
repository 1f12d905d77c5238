// Checks of a GGUF file's metadata against what llama.cpp asserts on.
//
// llama.cpp reports most damage as an error (a short read, a tensor of the
// wrong shape), but a few values reach a GGML_ASSERT, which ends the process:
// a block count of 0 or past LLAMA_MAX_LAYERS, a negative epsilon (at the first
// decode), an unknown rope scaling, expert counts that disagree, head counts
// that cannot divide. These are read here first, through ggml's own GGUF
// reader (which fails cleanly on a malformed file), so that the error names
// the key and its value. The vetting child (engine/vet.h) runs them before
// anything else; a damage they miss is still contained by that child.
#pragma once

#include <string>

#include "engine/owners.h"

namespace reclaim {

// Throws InvalidModelFile naming the first problem found.
void check_gguf_metadata(const std::string& path);

}  // namespace reclaim
