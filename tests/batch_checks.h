// What the batch tests look at after requests end: nothing of a request on
// the ledger, nothing of it in its sequence's memory.
#pragma once

#include <string>

#include "core/ledger.h"
#include "engine/batcher.h"

namespace reclaim::testing {

// Ledger entries of requests still open ("…/request:<n>").
inline size_t request_entries() {
  size_t n = 0;
  for (const LedgerEntry& e : Ledger::process().entries()) n += e.owner.find("/request:") != std::string::npos;
  return n;
}

// No position of sequence `seq` is left in the batch's memory.
inline bool sequence_empty(Batcher& b, int32_t seq) {
  return llama_memory_seq_pos_max(llama_get_memory(b.context()), seq) == -1;
}

}  // namespace reclaim::testing
