// What the registry and the engine throw, as OpenAI error objects with their
// HTTP statuses.
#pragma once

#include <exception>

#include "server/openai.h"

namespace httplib {
struct Response;
}

namespace reclaim::server {

ApiError to_api_error(const std::exception& ex);
void send_error(httplib::Response& res, const ApiError& e);

}  // namespace reclaim::server
