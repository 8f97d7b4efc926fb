// One JSON line per benchmark figure (DESIGN §12):
// {"bench", "value", "unit", "better", "baseline", "baseline_value", "ratio"}.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace tandem::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

inline void PrintFigure(const std::string& name, double value, const std::string& unit,
                        bool higher_is_better, const std::string& baseline, double baseline_value) {
  std::printf(
      "{\"bench\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", \"better\": \"%s\", "
      "\"baseline\": \"%s\", \"baseline_value\": %.6g, \"ratio\": %.4f}\n",
      name.c_str(), value, unit.c_str(), higher_is_better ? "higher" : "lower", baseline.c_str(),
      baseline_value, baseline_value != 0 ? value / baseline_value : 0.0);
  std::fflush(stdout);
}

}  // namespace tandem::bench
