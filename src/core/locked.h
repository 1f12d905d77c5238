// Locked (mlock'ed) address ranges of this process, from /proc/self/smaps,
// and unlocking what is left of ranges whose owner is gone.
//
// Why: llama.cpp's llama_model::impl declares its mlock records before its
// buffers, so ~impl frees the buffers first and munlocks afterwards; where the
// freed range has been trimmed or reused, munlock fails part-way and pages stay
// locked for the life of the process (measured: 4 KiB VmLck per load of a bpe
// model with --load-mode mlock). reclaim notes what a load locked and unlocks
// what of it is still locked after the free.
#pragma once

#include <cstdint>
#include <vector>

namespace reclaim {

struct AddressRange {
  uintptr_t begin = 0, end = 0;
  bool operator==(const AddressRange&) const = default;
};

// The VMAs that carry the "lo" (locked) flag, sorted.
std::vector<AddressRange> locked_ranges();

// Ranges in `after` not covered by `before`: what was locked in between.
std::vector<AddressRange> ranges_added(const std::vector<AddressRange>& before, const std::vector<AddressRange>& after);

// munlocks whatever parts of `ranges` are still locked and mapped; returns the
// bytes unlocked.
uint64_t unlock_remains(const std::vector<AddressRange>& ranges);

}  // namespace reclaim
