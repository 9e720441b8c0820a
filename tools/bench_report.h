// What `kiln bench` measured, and the two ways it prints it: one line per workload, or JSON.
//
//   BenchReport report;  report.results.push_back(result);
//   print_text(report, std::cout);          // name  value unit [min..max]  (NN% of reference ...)
//   std::cout << to_json(report).dump(2);   // the same, for scripts
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kiln {

// A measured figure in its result's unit: the median of the warm runs and the spread over them.
struct Figure {
  double median = 0, low = 0, high = 0;
};

// How kiln's output compared with the reference's (or a host computation's), checked once per workload.
struct Check {
  bool ok = true;
  std::string detail;  // "max |diff| 2.4e-07" or what differed, where
};

struct BenchResult {
  std::string name;  // "relu(a*b+c)"
  std::string size;  // "16M float32"
  std::string unit;  // "GB/s", "GFLOP/s", "us", "ms/kernel"
  bool higher_is_better = true;
  int runs = 0;
  std::optional<Figure> kiln;  // absent when kiln failed
  std::string failure;         // what kiln threw

  std::string reference_name;  // "C/OpenMP", "OpenBLAS sgemm (Haswell)"; empty: no reference
  std::optional<Figure> reference;
  std::string no_reference;    // why a reference that should be there is not

  std::optional<double> target_percent;  // of the reference's median
  std::optional<double> target_value;    // in `unit` (a time to stay below)
  std::optional<Check> check;
  std::vector<std::string> notes;        // anything that qualifies the figure
};

struct BenchReport {
  std::string device, device_detail;     // "CPU", "x86-64-v4, clang 14.0.6, 2 threads"
  std::string machine;                   // cores, and how busy other processes kept them
  std::optional<double> other_cores_busy;  // cores kept busy by other processes, on average over the run
  std::string references;                // what the references are and how they were built
  bool quick = false;
  std::vector<std::string> changes;      // what differs from the full run's sizes and counts, and why
  int runs = 0;
  std::vector<BenchResult> context;      // FMA peak, triad bandwidth
  std::vector<BenchResult> results;

  size_t failures() const;               // results whose output check failed or that threw
};

// kiln's median as a percentage of the reference's, when both exist.
std::optional<double> percent_of_reference(const BenchResult& result);

void print_text(const BenchReport& report, std::ostream& out);
nlohmann::ordered_json to_json(const BenchReport& report);

}  // namespace kiln
