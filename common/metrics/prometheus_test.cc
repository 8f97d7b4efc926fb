// The Prometheus text exposition: families with # HELP and # TYPE once, counters, cumulative
// histogram buckets with +Inf, _sum and _count, escaped label values, collectors at scrape time.
#include "common/metrics/prometheus.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>

namespace tandem::metrics {
namespace {

TEST(PrometheusTest, RendersCountersHistogramsAndCollectedSamplesInTheTextFormat) {
  Registry r;
  r.counter("tandem_x_total", "X things", {{"rpc", "pullRequest"}})->Add(3);
  r.counter("tandem_x_total", "X things", {{"rpc", "push\"Re\\quest"}})->Add();
  Histogram* h = r.histogram("tandem_lat_seconds", "Latency", {{"rpc", "a"}}, {0.1, 1.0});
  h->Observe(0.05);
  h->Observe(0.5);
  h->Observe(0.5);
  h->Observe(7);
  int scrapes = 0;
  r.AddCollector([&](std::vector<Registry::Sample>* out) {
    ++scrapes;
    out->push_back({"tandem_g", "A gauge", "gauge", {{"k", "v"}}, 2.5});
    out->push_back({"tandem_g", "A gauge", "gauge", {{"k", "w"}}, -1});
  });
  const std::string text = r.Render();
  EXPECT_EQ(scrapes, 1);
  const std::string want =
      "# HELP tandem_x_total X things\n"
      "# TYPE tandem_x_total counter\n"
      "tandem_x_total{rpc=\"pullRequest\"} 3\n"
      "tandem_x_total{rpc=\"push\\\"Re\\\\quest\"} 1\n"
      "# HELP tandem_lat_seconds Latency\n"
      "# TYPE tandem_lat_seconds histogram\n"
      "tandem_lat_seconds_bucket{rpc=\"a\",le=\"0.10000000000000001\"} 1\n"
      "tandem_lat_seconds_bucket{rpc=\"a\",le=\"1\"} 3\n"
      "tandem_lat_seconds_bucket{rpc=\"a\",le=\"+Inf\"} 4\n"
      "tandem_lat_seconds_sum{rpc=\"a\"} 8.0500000000000007\n"
      "tandem_lat_seconds_count{rpc=\"a\"} 4\n"
      "# HELP tandem_g A gauge\n"
      "# TYPE tandem_g gauge\n"
      "tandem_g{k=\"v\"} 2.5\n"
      "tandem_g{k=\"w\"} -1\n";
  EXPECT_EQ(text, want);
  // Every sample line has the exposition's shape.
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEInfNa]+$)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.starts_with("#")) {
      EXPECT_TRUE(std::regex_match(line, sample)) << line;
    }
}

TEST(PrometheusTest, TheSameNameAndLabelsGiveTheSameCounter) {
  Registry r;
  Counter* a = r.counter("c_total", "c", {{"x", "1"}});
  EXPECT_EQ(r.counter("c_total", "c", {{"x", "1"}}), a);
  EXPECT_NE(r.counter("c_total", "c", {{"x", "2"}}), a);
}

}  // namespace
}  // namespace tandem::metrics
