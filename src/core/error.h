// An error a user can act on: what was wrong, with the value that was wrong.
// The CLI prints what() on one line and exits 2.
#pragma once

#include <stdexcept>
#include <string>

namespace reclaim {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace reclaim
