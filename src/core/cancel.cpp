#include "core/cancel.h"

namespace reclaim {

const char* cancel_reason_name(CancelReason r) {
  switch (r) {
    case CancelReason::none: return "none";
    case CancelReason::interrupted: return "interrupted";
    case CancelReason::deadline: return "deadline";
    case CancelReason::caller: return "cancelled";
    case CancelReason::client_gone: return "client gone";
  }
  return "?";
}

}  // namespace reclaim
