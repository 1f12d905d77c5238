// What the registry and the engine throw, as OpenAI error objects with their
// HTTP statuses.
#pragma once

#include <exception>
#include <string>

#include "server/openai.h"

namespace httplib {
struct Request;
struct Response;
}

namespace reclaim::server {

ApiError to_api_error(const std::exception& ex);
void send_error(httplib::Response& res, const ApiError& e);
// The query's `name`, which must be there and not empty; a 400 that says
// `what` it must be otherwise.
std::string required_query(const httplib::Request& req, const char* name, const std::string& what);

}  // namespace reclaim::server
