#include "bench_report.h"

#include <cmath>
#include <cstdio>

#include "uop/error.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

// Three significant digits without an exponent: 431, 61.2, 4.07, 0.283.
std::string number(double v) {
  const char* format = "%.3g";
  if (std::fabs(v) >= 100) {
    format = "%.0f";
  } else if (std::fabs(v) >= 10) {
    format = "%.1f";
  } else if (std::fabs(v) >= 1) {
    format = "%.2f";
  }
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

std::string percent(double p) {
  char text[32];
  std::snprintf(text, sizeof text, p >= 10 ? "%.0f%%" : "%.2g%%", p);
  return text;
}

std::string figure_text(const Figure& f, const std::string& unit) {
  return cat(number(f.median), " ", unit, " [", number(f.low), "..", number(f.high), "]");
}

std::optional<bool> target_met(const BenchResult& r) {
  if (!r.kiln) return std::nullopt;
  if (r.target_value) return r.higher_is_better ? r.kiln->median >= *r.target_value : r.kiln->median < *r.target_value;
  std::optional<double> p = percent_of_reference(r);
  if (r.target_percent && p) return *p >= *r.target_percent;
  return std::nullopt;
}

std::string verdict(const std::optional<bool>& met) {
  if (!met) return "";
  return *met ? ": met" : ": MISSED";
}

// "(62% of reference: C/OpenMP 58.1 GB/s [50.2..60.0]; target >= 80%: MISSED)", or what stands for it.
std::string comparison_text(const BenchResult& r) {
  std::vector<std::string> parts;
  if (std::optional<double> p = percent_of_reference(r))
    parts.push_back(cat(percent(*p), " of reference: ", r.reference_name, " ", figure_text(*r.reference, r.unit)));
  else if (!r.no_reference.empty())
    parts.push_back(r.no_reference);
  if (r.target_percent && r.reference)
    parts.push_back(cat("target >= ", percent(*r.target_percent), verdict(target_met(r))));
  if (r.target_value)
    parts.push_back(cat("target ", r.higher_is_better ? ">= " : "< ", number(*r.target_value), " ", r.unit,
                        verdict(target_met(r))));
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "(" : "; ") + part;
  return text.empty() ? text : text + ")";
}

// Columns line up while they fit; a long one still gets two spaces after it.
std::string column(std::string text, size_t width) {
  text.append(text.size() + 2 < width ? width - text.size() : 2, ' ');
  return text;
}

std::string result_line(const BenchResult& r, int usual_runs) {
  std::string line = column(cat(r.name, "  ", r.size), 46);
  if (!r.kiln) return line + "FAILED: " + r.failure;
  line += figure_text(*r.kiln, r.unit);
  if (std::string comparison = comparison_text(r); !comparison.empty()) line = column(line, 80) + comparison;
  if (r.check) line += r.check->ok ? cat("  output ok (", r.check->detail, ")") : cat("  MISMATCH: ", r.check->detail);
  if (r.runs != usual_runs) line += cat("  [median of ", r.runs, " runs]");
  for (const std::string& note : r.notes) line += cat("  [", note, "]");
  return line;
}

Json figure_json(const Figure& f) { return {{"median", f.median}, {"min", f.low}, {"max", f.high}}; }

template <typename T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json result_json(const BenchResult& r) {
  Json j = {{"name", r.name}, {"size", r.size}, {"unit", r.unit}, {"higher_is_better", r.higher_is_better},
            {"runs", r.runs}, {"notes", r.notes}};
  j["kiln"] = r.kiln ? figure_json(*r.kiln) : Json(nullptr);
  if (!r.failure.empty()) j["failure"] = r.failure;
  if (r.reference) {
    j["reference"] = figure_json(*r.reference);
    j["reference"]["name"] = r.reference_name;
  } else {
    j["reference"] = nullptr;
  }
  if (!r.no_reference.empty()) j["no_reference"] = r.no_reference;
  j["percent_of_reference"] = or_null(percent_of_reference(r));
  if (r.target_percent) j["target"] = {{"percent_of_reference", *r.target_percent}};
  if (r.target_value) j["target"] = {{r.higher_is_better ? "at_least" : "below", *r.target_value}, {"unit", r.unit}};
  j["target_met"] = or_null(target_met(r));
  if (r.check) j["check"] = {{"ok", r.check->ok}, {"detail", r.check->detail}};
  return j;
}

// A context line is the machine's figure, not kiln's: just the figure.
Json context_json(const BenchResult& r) {
  Json j = {{"name", r.name}, {"size", r.size}, {"unit", r.unit}, {"runs", r.runs}};
  if (r.kiln) j.update(figure_json(*r.kiln));
  return j;
}

}  // namespace

size_t BenchReport::failures() const {
  size_t n = 0;
  for (const BenchResult& r : results) n += (!r.kiln || (r.check && !r.check->ok)) ? 1 : 0;
  return n;
}

std::optional<double> percent_of_reference(const BenchResult& r) {
  if (!r.kiln || !r.reference || r.reference->median <= 0) return std::nullopt;
  return r.higher_is_better ? 100 * r.kiln->median / r.reference->median : 100 * r.reference->median / r.kiln->median;
}

void print_text(const BenchReport& report, std::ostream& out) {
  out << "kiln bench on " << report.device << " (" << report.device_detail << "): median of " << report.runs
      << " warm runs, [min..max] over them\n";
  out << "machine: " << report.machine << '\n';
  out << "references: " << report.references << '\n';
  for (const std::string& change : report.changes) out << "note: " << change << '\n';
  for (const BenchResult& r : report.context) out << "context: " << result_line(r, report.runs) << '\n';
  out << '\n';
  for (const BenchResult& r : report.results) out << result_line(r, report.runs) << '\n';
}

Json to_json(const BenchReport& report) {
  Json j = {{"device", report.device}, {"device_detail", report.device_detail},
                      {"machine", report.machine}, {"other_cores_busy", or_null(report.other_cores_busy)},
                      {"references", report.references}, {"quick", report.quick}, {"runs", report.runs}};
  j["changes"] = report.changes;
  j["context"] = Json::array();
  for (const BenchResult& r : report.context) j["context"].push_back(context_json(r));
  j["workloads"] = Json::array();
  for (const BenchResult& r : report.results) j["workloads"].push_back(result_json(r));
  return j;
}

}  // namespace kiln
