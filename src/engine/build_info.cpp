#include "engine/build_info.h"

#include <build-info.h>

namespace reclaim {

const std::string& llama_build() {
  static const std::string build = llama_build_info();
  return build;
}

}  // namespace reclaim
