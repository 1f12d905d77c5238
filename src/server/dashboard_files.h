// The dashboard's files, built into the binary (cmake/embed_files.cmake):
// the page, its script and style, and uPlot as scripts/setup fetched it.
#pragma once

#include <cstddef>
#include <string_view>

namespace reclaim::server {

struct DashboardFile {
  const char* url;   // "/" or "/dashboard/NAME"
  const char* type;  // its media type, without a charset (every file is UTF-8)
  std::string_view bytes;
};

extern const DashboardFile kDashboardFiles[];
extern const size_t kDashboardFileCount;

}  // namespace reclaim::server
