#include "audit/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/size.h"
#include "core/stats.h"

namespace reclaim::audit {

namespace {

std::string show(int64_t v, const char* unit) {
  if (std::string(unit) == "bytes") return format_bytes(v);
  return std::to_string(v);
}

std::string signed_show(int64_t v, const char* unit) {
  std::string s = show(v, unit);
  return v > 0 ? "+" + s : s;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.insert(0, w - s.size(), ' ');
  return s;
}

double median_seconds(const SideResult& r) {
  std::vector<double> v;
  for (const CycleRecord& c : r.cycles) v.push_back(c.seconds);
  return median(std::move(v));
}

std::string usage_line(const Usage& u) {
  return "anon " + signed_show(u.anon, "bytes") + ", rss " + signed_show(u.rss, "bytes") + ", heap in use " +
         signed_show(u.heap_in_use, "bytes") + ", threads " + signed_show(u.threads, "count") + ", maps " +
         signed_show(u.maps, "count");
}

}  // namespace

namespace {

// Each figure's baseline, peak, after, residue and growth, beside raw
// llama.cpp's residue and growth where it ran.
void figures_table(std::ostringstream& out, const ScenarioReport& sr) {
  const SideResult& r = sr.reclaim;
  out << pad("figure", 13) << pad("baseline", 12) << pad("peak", 12) << pad("after", 12) << pad("residue", 12)
      << pad("growth", 12);
  if (sr.raw) out << "  │" << pad("raw residue", 13) << pad("raw growth", 12);
  out << "\n";
  const size_t last = r.cycles.size() - 1;
  Usage peak = r.cycles[0].peak;
  for (const CycleRecord& c : r.cycles) peak = max_of(peak, c.peak);
  for (const Figure& f : usage_figures()) {
    int64_t res = residue(r, last).*f.field;
    int64_t growth = res - residue(r, 0).*f.field;
    out << pad(f.name, 13) << pad(show(r.baseline.*f.field, f.unit), 12) << pad(show(peak.*f.field, f.unit), 12)
        << pad(show(r.cycles[last].after.*f.field, f.unit), 12) << pad(signed_show(res, f.unit), 12)
        << pad(signed_show(growth, f.unit), 12);
    if (sr.raw && !sr.raw->cycles.empty()) {
      size_t rl = sr.raw->cycles.size() - 1;
      int64_t rres = residue(*sr.raw, rl).*f.field;
      out << "  │" << pad(signed_show(rres, f.unit), 13)
          << pad(signed_show(rres - residue(*sr.raw, 0).*f.field, f.unit), 12);
    }
    out << "\n";
  }
}

// What stays between requests while the model is loaded, where the
// scenario has requests.
void requests_table(std::ostringstream& out, const ScenarioReport& sr) {
  const SideResult& r = sr.reclaim;
  if (!request_figures(r, &Usage::anon).present) return;
  out << "between requests, model loaded (worst cycle): residue after a request "
      << (r.requests_from_first ? "(from the first wave, which touches the batch's context)" : "") << " / growth first to last\n";
  for (const Figure& f : usage_figures()) {
    if (f.field != &Usage::anon && f.field != &Usage::rss && f.field != &Usage::heap_in_use &&
        f.field != &Usage::fds && f.field != &Usage::threads && f.field != &Usage::maps) {
      continue;
    }
    RequestFigures q = request_figures(r, f.field);
    out << pad(f.name, 13) << pad(signed_show(q.residue, f.unit), 12) << pad(signed_show(q.growth, f.unit), 12);
    if (sr.raw) {
      RequestFigures rq = request_figures(*sr.raw, f.field);
      out << "  │ raw" << pad(signed_show(rq.residue, f.unit), 12) << pad(signed_show(rq.growth, f.unit), 12);
    }
    out << "\n";
  }
}

void cancel_counts(std::ostringstream& out, const ScenarioReport& sr) {
  const SideResult& r = sr.reclaim;
  auto counts = [](const SideResult& s) {
    int p = 0, g = 0, n = 0;
    for (const CycleRecord& c : s.cycles) {
      p += c.cancelled_in_prompt;
      g += c.cancelled_in_generation;
      n += c.not_cancelled;
    }
    return std::to_string(p) + " in the prompt, " + std::to_string(g) + " while generating, " + std::to_string(n) +
           " finished first";
  };
  out << "requests cancelled: " << counts(r);
  if (sr.raw) out << "; raw: " << counts(*sr.raw);
  out << "\n";
}

}  // namespace

std::string render_table(const AuditReport& report) {
  std::ostringstream out;
  const CycleOptions& o = report.options.cycle;
  for (const ScenarioReport& sr : report.scenarios) {
    const SideResult& r = sr.reclaim;
    out << "scenario " << scenario_name(sr.scenario) << " · " << o.model << " · load mode " << o.load_mode << " · "
        << r.cycles.size() << " cycles\n";
    // device-idle runs no warm-up: its baseline is the device released.
    const bool warmed_device = !r.devices.empty() && sr.scenario != Scenario::device_idle;
    const Usage start_up = (warmed_device ? r.device_warm_before : r.baseline) - r.start_before;
    out << "start-up warmed before the baseline: " << r.warmed << ": " << usage_line(start_up) << "\n";
    if (warmed_device) {
      out << "device warm-up before the baseline (one cycle on " << r.devices
          << "; the shader pipelines it compiled and the driver's state stay until the process exits): "
          << usage_line(r.baseline - r.device_warm_before) << "\n";
    } else if (!r.devices.empty()) {
      out << "no device warm-up: the baseline is " << r.devices
          << " released after start-up, and each cycle releases it again after its unload\n";
    }
    figures_table(out, sr);
    requests_table(out, sr);
    if (sr.scenario == Scenario::cancel) cancel_counts(out, sr);
    char t[160];
    std::snprintf(t, sizeof t, "cycle time (median): %.1f ms", median_seconds(r) * 1e3);
    out << t;
    if (sr.raw) {
      double raw = median_seconds(*sr.raw);
      std::snprintf(t, sizeof t, "; raw %.1f ms; reclaim/raw %.3f", raw * 1e3, raw > 0 ? median_seconds(r) / raw : 0.0);
      out << t;
    }
    out << "\n";
    for (const Check& c : sr.checks) {
      const char* unit = c.bytes ? "bytes" : "count";
      out << (c.ok ? "  ok    " : "  FAIL  ") << c.name << " " << signed_show(c.value, unit) << " (limit "
          << show(c.limit, unit) << ")\n";
    }
    for (const std::string& e : r.errors) out << "  error: " << e << "\n";
    out << "\n";
  }
  out << (report.ok ? "audit passed" : "audit FAILED: a figure exceeds its threshold") << "\n";
  return out.str();
}

nlohmann::json report_json(const AuditReport& report) {
  const Thresholds& l = report.options.limits;
  nlohmann::json j = {
      {"options", to_json(report.options.cycle)},
      {"thresholds",
       {{"anon_residue", l.anon_residue}, {"anon_growth", l.anon_growth}, {"locked", l.locked}, {"fds", l.fds},
        {"threads", l.threads}, {"maps", l.maps}, {"device", l.device}}},
      {"ok", report.ok},
  };
  j["options"].erase("scenario");
  nlohmann::json scenarios = nlohmann::json::array();
  for (const ScenarioReport& sr : report.scenarios) {
    nlohmann::json s = {{"scenario", scenario_name(sr.scenario)}, {"ok", sr.ok}, {"reclaim", to_json(sr.reclaim)}};
    nlohmann::json residues = nlohmann::json::array();
    for (size_t i = 0; i < sr.reclaim.cycles.size(); ++i) residues.push_back(to_json(residue(sr.reclaim, i)));
    s["reclaim_residues"] = residues;
    if (sr.raw) {
      s["raw"] = to_json(*sr.raw);
      nlohmann::json raw_res = nlohmann::json::array();
      for (size_t i = 0; i < sr.raw->cycles.size(); ++i) raw_res.push_back(to_json(residue(*sr.raw, i)));
      s["raw_residues"] = raw_res;
    }
    nlohmann::json checks = nlohmann::json::array();
    for (const Check& c : sr.checks) checks.push_back({{"name", c.name}, {"value", c.value}, {"limit", c.limit}, {"ok", c.ok}});
    s["checks"] = checks;
    scenarios.push_back(s);
  }
  j["scenarios"] = scenarios;
  return j;
}

std::string render_svg(const AuditReport& report) {
  // One panel a scenario: RSS and anon RSS over time, reclaim solid, raw dashed.
  const int W = 760, H = 240, M = 50;
  const int total_h = static_cast<int>(report.scenarios.size()) * (H + 20) + 10;
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << total_h
      << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
  int y0 = 10;
  for (const ScenarioReport& sr : report.scenarios) {
    std::vector<const SideResult*> sides = {&sr.reclaim};
    if (sr.raw) sides.push_back(&*sr.raw);
    double tmax = 1e-9, vmax = 1;
    for (const SideResult* s : sides) {
      for (const Sample& p : s->samples) {
        tmax = std::max(tmax, p.t);
        vmax = std::max(vmax, static_cast<double>(std::max(p.rss, p.anon)));
      }
      vmax = std::max(vmax, static_cast<double>(s->baseline.rss));
    }
    auto x = [&](double t) { return M + (W - M - 10) * t / tmax; };
    auto y = [&](double v) { return y0 + H - 25 - (H - 45) * v / vmax; };
    svg << "<text x='" << M << "' y='" << y0 + 12 << "' font-weight='bold'>" << scenario_name(sr.scenario)
        << ": RSS (blue) and anon RSS (red) over time; reclaim solid, raw dashed</text>\n";
    svg << "<line x1='" << M << "' y1='" << y(0) << "' x2='" << W - 10 << "' y2='" << y(0) << "' stroke='#888'/>\n";
    svg << "<line x1='" << M << "' y1='" << y(0) << "' x2='" << M << "' y2='" << y(vmax) << "' stroke='#888'/>\n";
    svg << "<text x='4' y='" << y(vmax) + 4 << "'>" << format_bytes(static_cast<int64_t>(vmax)) << "</text>\n";
    svg << "<text x='4' y='" << y(0) << "'>0</text>\n";
    char tl[64];
    std::snprintf(tl, sizeof tl, "%.2f s", tmax);
    svg << "<text x='" << W - 50 << "' y='" << y(0) + 14 << "'>" << tl << "</text>\n";
    for (const SideResult* s : sides) {
      const char* dash = s->side == "raw" ? " stroke-dasharray='5,3'" : "";
      for (int which = 0; which < 2; ++which) {
        svg << "<polyline fill='none' stroke='" << (which ? "#c33" : "#36c") << "' stroke-width='1.5'" << dash
            << " points='" << x(0) << "," << y(static_cast<double>(which ? s->baseline.anon : s->baseline.rss));
        for (const Sample& p : s->samples) {
          svg << " " << x(p.t) << "," << y(static_cast<double>(which ? p.anon : p.rss));
        }
        svg << "'/>\n";
      }
    }
    y0 += H + 20;
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace reclaim::audit
