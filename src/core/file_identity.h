// Which file a path names now: device, inode, size and modification time. A
// file replaced or rewritten in place reads differently, so what was learned
// about the old one (its memory estimate, its vetting) is not reused for it.
#pragma once

#include <string>

namespace reclaim {

// Empty when the file cannot be stat'ed (whoever opens it will say why).
std::string file_identity(const std::string& path);

}  // namespace reclaim
