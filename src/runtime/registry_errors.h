// The registry's refusals, each a status a server answers with.
#pragma once

#include "core/error.h"

namespace reclaim {

// Errors that a server maps to HTTP statuses.
class UnknownModel : public Error {  // 404
 public:
  using Error::Error;
};
class BadModelName : public Error {  // 400
 public:
  using Error::Error;
};
class NoRoom : public Error {  // 503: the budget cannot take it now
 public:
  using Error::Error;
};
class NotLoaded : public Error {  // 503: unloaded and autoload is off
 public:
  using Error::Error;
};
class QueueFull : public Error {  // 429: too many requests waiting for the model
 public:
  using Error::Error;
};
class QueueTimeout : public Error {  // 503: waited queue_timeout for a slot or a load
 public:
  using Error::Error;
};
class ClientGone : public Error {  // the waiting request's client left
 public:
  using Error::Error;
};

}  // namespace reclaim
