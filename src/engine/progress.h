// The load progress callback that `reclaim run` and `serve` hand to a model
// load: a bar on stderr when stderr is a terminal, nothing otherwise, and a
// stop (LoadAborted) as soon as the cancel token is set.
#pragma once

#include <functional>
#include <string>

#include "core/cancel.h"

namespace reclaim {

// `cancel` may be null. `draw`: false for silent (the default checks isatty(2)).
std::function<bool(float)> load_progress(std::string label, const CancelToken* cancel, bool draw);
bool stderr_is_terminal();

}  // namespace reclaim
