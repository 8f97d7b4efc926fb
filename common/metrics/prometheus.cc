#include "common/metrics/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tandem::metrics {
namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string Escape(const std::string& s, bool in_help) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && !in_help)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

// The labels rendered inside the braces, with `extra` appended (a histogram's le).
std::string Inside(const std::string& rendered, const std::string& extra) {
  std::string inner = rendered.empty() ? "" : rendered.substr(1, rendered.size() - 2);
  if (!extra.empty()) inner += (inner.empty() ? "" : ",") + extra;
  return inner.empty() ? "" : "{" + inner + "}";
}

void Header(std::string* out, const std::string& name, const std::string& help, const char* type) {
  *out += "# HELP " + name + " " + Escape(help, true) + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) s += ",";
    s += labels[i].first + "=\"" + Escape(labels[i].second, false) + "\"";
  }
  return s + "}";
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  if (v > 0) sum_micro_.fetch_add(static_cast<uint64_t>(std::llround(v * 1e6)));
}

std::vector<uint64_t> Histogram::counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

double Histogram::sum() const { return static_cast<double>(sum_micro_.load()) / 1e6; }

std::vector<double> LatencyBuckets() {
  std::vector<double> b;
  for (double v = 1e-4; v < 7; v *= 4) b.push_back(v);
  return b;
}

Counter* Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  MutexLock lock(&mu_);
  auto& family = counters_[name];
  family.help = help;
  auto& slot = family.by_labels[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Histogram* Registry::histogram(const std::string& name, const std::string& help,
                               const Labels& labels, std::vector<double> bounds) {
  MutexLock lock(&mu_);
  auto& family = histograms_[name];
  family.help = help;
  auto& slot = family.by_labels[RenderLabels(labels)];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return slot.get();
}

void Registry::AddCollector(std::function<void(std::vector<Sample>*)> collector) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() const {
  std::string out;
  std::vector<Sample> samples;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, family] : counters_) {
      Header(&out, name, family.help, "counter");
      for (const auto& [labels, c] : family.by_labels)
        out += name + labels + " " + std::to_string(c->value()) + "\n";
    }
    for (const auto& [name, family] : histograms_) {
      Header(&out, name, family.help, "histogram");
      for (const auto& [labels, h] : family.by_labels) {
        const auto counts = h->counts();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cumulative += counts[i];
          const std::string le =
              i < h->bounds().size() ? Number(h->bounds()[i]) : std::string("+Inf");
          out += name + "_bucket" + Inside(labels, "le=\"" + le + "\"") + " " +
                 std::to_string(cumulative) + "\n";
        }
        out += name + "_sum" + labels + " " + Number(h->sum()) + "\n";
        out += name + "_count" + labels + " " + std::to_string(cumulative) + "\n";
      }
    }
    for (const auto& collect : collectors_) collect(&samples);
  }
  // Collected samples grouped by name, one header per family.
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& a, const Sample& b) { return a.name < b.name; });
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (i == 0 || samples[i - 1].name != s.name) Header(&out, s.name, s.help, s.type.c_str());
    out += s.name + RenderLabels(s.labels) + " " + Number(s.value) + "\n";
  }
  return out;
}

void AddGauge(std::vector<Registry::Sample>* out, const std::string& name, const std::string& help,
              double value, Labels labels) {
  out->push_back({name, help, "gauge", std::move(labels), value});
}

void AddCount(std::vector<Registry::Sample>* out, const std::string& name, const std::string& help,
              uint64_t value, Labels labels) {
  out->push_back({name, help, "counter", std::move(labels), static_cast<double>(value)});
}

}  // namespace tandem::metrics
