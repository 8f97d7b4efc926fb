// Prometheus metrics of a daemon (issue 9, DESIGN §12): counters, gauges and histograms kept
// with atomics on the hot path, and values read at scrape time from the stats the modules keep
// anyway (collectors), rendered in the text exposition format 0.0.4.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/sync.h"

namespace tandem::metrics {

// `name{k="v",...}`: label values escaped; labels in the order given.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Cumulative buckets with fixed upper bounds (seconds, say), a sum and a count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), then +Inf last.
  std::vector<uint64_t> counts() const;
  double sum() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> sum_micro_{0};  // sum in millionths: atomics without a CAS loop
};

// Exponential buckets from 100 µs to ~6.5 s: request latencies.
std::vector<double> LatencyBuckets();

// Safe for concurrent use. Metrics live as long as the registry; the pointers it hands out stay
// valid.
class Registry {
 public:
  Counter* counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* histogram(const std::string& name, const std::string& help, const Labels& labels,
                       std::vector<double> bounds);

  // A sample a collector emits at scrape time.
  struct Sample {
    std::string name, help, type;  // type: counter | gauge
    Labels labels;
    double value = 0;
  };
  // Called on every scrape (from the HTTP thread); must be quick and thread-safe.
  void AddCollector(std::function<void(std::vector<Sample>*)> collector);

  // The text exposition format: # HELP and # TYPE once per family, then its samples.
  std::string Render() const;

 private:
  template <typename T>
  struct Family {
    std::string help;
    std::map<std::string, std::unique_ptr<T>> by_labels;  // rendered labels -> metric
  };
  mutable Mutex mu_;
  std::map<std::string, Family<Counter>> counters_ GUARDED_BY(mu_);
  std::map<std::string, Family<Histogram>> histograms_ GUARDED_BY(mu_);
  std::vector<std::function<void(std::vector<Sample>*)>> collectors_ GUARDED_BY(mu_);
};

// `{k="v",...}` with Prometheus escaping ("" for no labels).
std::string RenderLabels(const Labels& labels);

// A collector's gauge and counter samples (Registry::AddCollector).
void AddGauge(std::vector<Registry::Sample>* out, const std::string& name, const std::string& help,
              double value, Labels labels = {});
void AddCount(std::vector<Registry::Sample>* out, const std::string& name, const std::string& help,
              uint64_t value, Labels labels = {});

}  // namespace tandem::metrics
