// How an audit is shown: a table for people, JSON for programs, SVG for eyes.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "audit/audit.h"

namespace reclaim::audit {

std::string render_table(const AuditReport& report);
nlohmann::json report_json(const AuditReport& report);
std::string render_svg(const AuditReport& report);

}  // namespace reclaim::audit
