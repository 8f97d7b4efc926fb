// Serving benchmark (issue 20): `tandem serve` over HTTP against scoring the same requests in
// this process, and a followed training job's checkpoints applied as deltas while requests flow.
//
// A. Steady state (`--only steady`). A bundle of the configs/local.yaml model shape (initial
//    dense parameters, kTableRows random rows per table, no training) is served by a
//    serve::ServeProcess in this process (its own HTTP server on 127.0.0.1), and clients with
//    keep-alive connections post pre-encoded {"instances": [...]} bodies of batch 1, 64 and 1024
//    at concurrency 1 and 8. Baseline: ModelVersion::Score of the same bundle on the same
//    requests, parsed once outside the timing, so the ratio is what JSON, HTTP and the server's
//    threads add to scoring.
//     - serve_p50_ms_b<B>_c<C>, serve_p99_ms_b<B>_c<C> against inprocess_p50/p99_ms_b<B>;
//     - serve_rps_b<B>_c<C> against inprocess_rps_b<B> (one thread calling Score back to back);
//     - serve_p99_b64_c1_vs_target: the target p99 <= 2 x in-process p99 + 1 ms (ratio <= 1).
//    Each figure is the median over --reps repetitions (served and in-process interleaved, so a
//    noisy neighbour hurts both alike).
// B. Deltas while serving (`--only delta`). A real `tandem local` job (2 PS, 1 worker, synthetic
//    data, RocksDB) checkpoints every E steps; once it has finished, a staging directory is
//    shown its checkpoints one at a time (symlinks; no LATEST, so the follower takes the newest
//    ckpt-*/MANIFEST), with a ServeProcess following it and one client posting batch-64
//    requests throughout.
//     - serve_delta_apply_s: from a checkpoint's link to GET /v1/models/<name> naming its step
//       (median over updates) against the 1 s target; serve_delta_apply_s_server is the
//       follower's own tandem_serve_update_seconds for the same updates;
//     - serve_delta_rows_applied: rows applied per update (median) against the rows read to
//       find them;
//     - serve_p99_ms_during_update: batch-64 p99 of the requests overlapping the updates
//       against the steady p99 just before (target ratio <= 2).
// Usage: serve_bench [--only steady|delta|startup] [--reps N] [--scale X] [--tandem PATH]
//                    [--every-steps E] [--checkpoints K]
// (--scale multiplies the call counts of part A, e.g. 0.2 for a quick look).
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_json.h"
#include "common/checkpoint_layout.h"
#include "common/config/job_config.h"
#include "common/embedding/table_spec.h"
#include "common/log.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "offline/bundle.h"
#include "serve/request.h"
#include "serve/serve_main.h"
#include "serve/served_model.h"
#include "worker/data/record.h"
#include "worker/dense_state.h"
#include "worker/device/backend_factory.h"
#include "worker/frozen_model.h"
#include "worker/trainer.h"

#ifndef TANDEM_BINARY
#define TANDEM_BINARY "tandem"
#endif

namespace tandem::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kDense = 13;
constexpr int kFields = 26;
constexpr int kDim = 16;
constexpr int64_t kBundleStep = 1000;
// Rows per table of the bundle; request values are drawn below kValueRange, a few of them above
// the rows held, so that the unknown-id path (an initial value computed per lookup) is in it.
constexpr uint64_t kTableRows = 20000;
constexpr uint64_t kValueRange = 25000;
constexpr double kUnknownFraction = 0.05;
constexpr int kInstancePool = 4096;
// Part B's synthetic data: Zipf 1.05 over 200000 values per field gives about 4000 distinct
// values of a field in 10 steps of 1024, so about 1e5 rows of the 26 tables change between
// checkpoints 10 steps apart.
constexpr int64_t kDeltaVocab = 200000;
constexpr double kDeltaZipf = 1.05;
constexpr char kModelName[] = "tandem";
constexpr char kPredictPath[] = "/v1/models/tandem:predict";
constexpr char kStatusPath[] = "/v1/models/tandem";
// Part A: a served measurement stops after this long even short of its calls (a server that
// answers in 40 ms would otherwise take minutes for 2000 calls of batch 1).
constexpr double kMaxSecondsPerRun = 3.0;

struct Args {
  std::string only;  // "", "steady" or "delta"
  int reps = 3;
  double scale = 1.0;
  std::string tandem = TANDEM_BINARY;
  int64_t every_steps = 10;  // part B: steps between checkpoints
  int checkpoints = 6;       // part B: checkpoints the job makes (the first is loaded whole)
};

double Seconds(Clock::time_point t0, Clock::time_point t1 = Clock::now()) {
  return std::chrono::duration<double>(t1 - t0).count();
}

// Nearest-rank percentile of `v` (q in (0, 1]); 0 for none.
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// The configs/local.yaml model (what `tandem local --config configs/local.yaml` trains) over
// synthetic data; `synthetic` holds data.synthetic's keys, indented. Ends inside `train:`.
std::string ModelYaml(const std::string& synthetic = "") {
  return "model:\n  embedding_dim: 16\n  bottom_mlp: [64, 16]\n  top_mlp: [64, 32, 1]\n"
         "  interaction: dot\n"
         "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n"
         "    init: {dist: uniform, scale: 0.01}\n"
         "data:\n  format: synthetic\n  num_dense: 13\n  num_categorical: 26\n" +
         (synthetic.empty() ? "" : "  synthetic:\n" + synthetic) +
         "train:\n  seed: 1\n  dense_optimizer: adam\n  dense_lr: 0.01\n";
}

// ---------------------------------------------------------------------------------------------
// Requests

// Draws a categorical value: Zipf over `vocab` ranks (as the synthetic data does), or uniform
// with a fraction above the rows a bundle holds.
class ValueSampler {
 public:
  static ValueSampler Zipf(uint64_t vocab, double exponent) {
    ValueSampler s;
    s.cdf_.resize(vocab);
    double total = 0;
    for (uint64_t k = 0; k < vocab; ++k) s.cdf_[k] = total += std::pow(double(k + 1), -exponent);
    for (double& c : s.cdf_) c /= total;
    s.cdf_.back() = 1.0;
    return s;
  }
  static ValueSampler Uniform() { return ValueSampler(); }

  uint64_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    if (!cdf_.empty())
      return static_cast<uint64_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    if (u < kUnknownFraction)
      return kTableRows + rng() % (kValueRange - kTableRows);  // no row: an unknown id
    return rng() % kTableRows;
  }

 private:
  std::vector<double> cdf_;  // empty: uniform
};

// One instance in request.h's row form: I1..I13 small counts (some missing), C1..C26 hex values.
std::string Instance(const ValueSampler& values, std::mt19937_64& rng) {
  std::string s = "{";
  char buf[48];
  for (int i = 1; i <= kDense; ++i) {
    if (rng() % 10 == 0) continue;  // a missing field, as the synthetic data has
    std::snprintf(buf, sizeof buf, "%s\"I%d\": %d", s.size() > 1 ? ", " : "", i,
                  static_cast<int>(rng() % 200));
    s += buf;
  }
  for (int f = 1; f <= kFields; ++f) {
    std::snprintf(buf, sizeof buf, "%s\"C%d\": \"%08llx\"", s.size() > 1 ? ", " : "", f,
                  static_cast<unsigned long long>(values(rng)));
    s += buf;
  }
  return s + "}";
}

// `count` bodies of `batch` instances each, taken in turn from `pool`.
std::vector<std::string> Bodies(const std::vector<std::string>& pool, int batch, int count) {
  std::vector<std::string> bodies;
  size_t next = 0;
  for (int k = 0; k < count; ++k) {
    std::string b = "{\"instances\": [";
    for (int i = 0; i < batch; ++i, next = (next + 1) % pool.size())
      b += (i ? ", " : "") + pool[next];
    bodies.push_back(b + "]}");
  }
  return bodies;
}

// ---------------------------------------------------------------------------------------------
// HTTP

Status Post(httplib::Client* client, const std::string& body) {
  auto res = client->Post(kPredictPath, body, "application/json");
  if (!res) return Status::Unavailable("predict: " + httplib::to_string(res.error()));
  if (res->status != 200)
    return Status::Internal("predict: HTTP " + std::to_string(res->status) + " " + res->body);
  return Status::Ok();
}

// The served step as GET /v1/models/<name> reports it; -1 when none (yet).
int64_t ServedStep(httplib::Client* client) {
  auto res = client->Get(kStatusPath);
  if (!res || res->status != 200) return -1;
  const std::string key = "\"version\":\"";
  const size_t at = res->body.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(res->body.c_str() + at + key.size(), nullptr, 10);
}

// The value of the unlabelled sample `name` in GET /metrics; 0 when absent.
double Metric(httplib::Client* client, const std::string& name) {
  auto res = client->Get("/metrics");
  if (!res || res->status != 200) return 0;
  size_t at = 0;
  const std::string& text = res->body;
  while ((at = text.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n')
      return std::strtod(text.c_str() + at + name.size(), nullptr);
    at += name.size();
  }
  return 0;
}

std::unique_ptr<httplib::Client> NewClient(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_keep_alive(true);
  // As curl and most HTTP clients do: a request written in two parts (headers, body) must not
  // wait for the server's delayed ACK of the first (Nagle), 40 ms on Linux.
  c->set_tcp_nodelay(true);
  c->set_read_timeout(60, 0);
  return c;
}

// Latencies (ms) of `calls` posts spread over `threads` clients (own connection each), after
// `warmup` untimed posts per client, and the wall time of the timed part. A client stops early
// after `max_seconds`, so that a slow server bounds the run's time rather than the count.
struct Load {
  std::vector<double> latencies_ms;
  double seconds = 0;
};

StatusOr<Load> RunClients(int port, const std::vector<std::string>& bodies, int threads, int calls,
                          int warmup, double max_seconds = 1e9) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
  std::vector<Status> status(static_cast<size_t>(threads), Status::Ok());
  std::latch ready(threads + 1), go(1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto client = NewClient(port);
      size_t next = static_cast<size_t>(t) * 7;  // threads do not march through the same bodies
      Status& s = status[static_cast<size_t>(t)];
      for (int i = 0; i < warmup && s.ok(); ++i)
        s = Post(client.get(), bodies[next++ % bodies.size()]);
      ready.count_down();
      go.wait();
      const int mine = calls / threads + (t < calls % threads ? 1 : 0);
      const auto started = Clock::now();
      for (int i = 0; i < mine && s.ok() && Seconds(started) < max_seconds; ++i) {
        const auto t0 = Clock::now();
        s = Post(client.get(), bodies[next++ % bodies.size()]);
        lat[static_cast<size_t>(t)].push_back(Seconds(t0) * 1e3);
      }
    });
  }
  ready.arrive_and_wait();
  const auto t0 = Clock::now();
  go.count_down();
  for (auto& th : pool) th.join();
  Load load;
  load.seconds = Seconds(t0);
  for (size_t t = 0; t < lat.size(); ++t) {
    TANDEM_RETURN_IF_ERROR(status[t]);
    load.latencies_ms.insert(load.latencies_ms.end(), lat[t].begin(), lat[t].end());
  }
  return load;
}

// ---------------------------------------------------------------------------------------------
// A. Steady state

// A bundle of the local.yaml model under `dir`/bundle: the dense parameters a trainer starts
// from and kTableRows random rows per table, the ids those of values 0 .. kTableRows-1.
StatusOr<std::string> BuildBundle(const std::string& dir, uint64_t table_rows = kTableRows) {
  TANDEM_ASSIGN_OR_RETURN(config::JobConfig job,
                          config::ParseJobConfig(ModelYaml(), "bench.yaml", {}));
  TANDEM_ASSIGN_OR_RETURN(auto backend, device::CreateBackend(job.train));
  const std::vector<worker::FrozenTable> no_rows;
  worker::FrozenEmbeddings rows(&no_rows, embedding::TableSpecsFromConfig(job), job.train.seed,
                                worker::UnknownIds::kInitial);
  worker::TrainerOptions to;
  to.job = &job;
  to.embeddings = &rows;
  to.backend = backend.get();
  TANDEM_ASSIGN_OR_RETURN(auto trainer, worker::Trainer::Create(to));
  worker::FrozenModel m;
  m.job = job;
  m.step = kBundleStep;
  m.dense = worker::WithoutOptimizerState(worker::SnapshotDenseState(*trainer, kBundleStep));
  std::mt19937_64 rng(20);
  std::uniform_real_distribution<float> value(-0.05f, 0.05f);
  for (int t = 0; t < kFields; ++t) {
    worker::FrozenTable table;
    table.table = static_cast<uint32_t>(t);
    table.dim = kDim;
    for (uint64_t v = 0; v < table_rows; ++v) {
      table.ids.push_back(data::CategoricalId(t, v));
      for (int d = 0; d < kDim; ++d) table.values.push_back(value(rng));
    }
    TANDEM_RETURN_IF_ERROR(table.Finish());
    m.tables.push_back(std::move(table));
  }
  const std::string out = dir + "/bundle-" + std::to_string(table_rows);
  TANDEM_RETURN_IF_ERROR(
      offline::WriteBundle(m, {"5e7be5c4000000000000000000000001", "serve_bench"}, out));
  return out;
}

struct Case {
  int batch;
  int calls;   // timed calls per repetition, at any concurrency
  int bodies;  // distinct request bodies
};

struct Figures {
  std::vector<double> p50, p99, rps;  // per repetition
};

Status RunSteady(const Args& args) {
  const auto start = Clock::now();
  testing::TempDir dir;
  TANDEM_ASSIGN_OR_RETURN(std::string bundle, BuildBundle(dir.path()));
  const ValueSampler values = ValueSampler::Uniform();
  std::mt19937_64 rng(64);
  std::vector<std::string> pool;
  for (int i = 0; i < kInstancePool; ++i) pool.push_back(Instance(values, rng));
  auto scaled = [&](int n) { return std::max(16, static_cast<int>(n * args.scale)); };
  const std::vector<Case> cases = {
      {1, scaled(2000), 256}, {64, scaled(500), 64}, {1024, scaled(50), 8}};
  const std::vector<int> concurrency = {1, 8};

  TANDEM_ASSIGN_OR_RETURN(auto version,
                          serve::LoadBundleVersion(bundle, {}, false, serve::VersionOptions{}));
  serve::ServeOptions so;
  so.model = bundle;
  so.http.host = "127.0.0.1";
  so.http.port = 0;
  so.http.model_name = kModelName;
  TANDEM_ASSIGN_OR_RETURN(auto server, serve::ServeProcess::Start(so));

  std::vector<std::vector<std::string>> bodies;
  std::vector<std::vector<std::vector<data::Sample>>> parsed;
  for (const Case& c : cases) {
    bodies.push_back(Bodies(pool, c.batch, c.bodies));
    parsed.emplace_back();
    // What parsing alone costs of a served request (stderr: where the time beyond Score goes).
    std::vector<double> parse_ms;
    size_t bytes = 0;
    for (const std::string& b : bodies.back()) {
      serve::RequestError error;
      const auto t0 = Clock::now();
      TANDEM_ASSIGN_OR_RETURN(serve::ParsedRequest r,
                              serve::ParsePredictRequest(b, version->schema(), 4096, &error));
      parse_ms.push_back(Seconds(t0) * 1e3);
      bytes += b.size();
      parsed.back().push_back(std::move(r.samples));
    }
    std::fprintf(stderr, "serve_bench: batch %4d: %.0f bytes a body, parsed in %.3f ms (median)\n",
                 c.batch, static_cast<double>(bytes) / c.bodies, Median(parse_ms));
  }

  std::vector<Figures> inproc(cases.size());
  std::vector<std::vector<Figures>> served(cases.size(), std::vector<Figures>(concurrency.size()));
  std::vector<float> probs;
  for (int rep = 0; rep < args.reps; ++rep) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const auto& samples = parsed[i];
      // Warm-up: the scorer's buffers grow to the batch.
      for (int k = 0; k < 3; ++k)
        TANDEM_RETURN_IF_ERROR(version->Score(samples[0], &probs, nullptr));
      std::vector<double> lat;
      const auto t0 = Clock::now();
      for (int k = 0; k < c.calls; ++k) {
        const auto s0 = Clock::now();
        TANDEM_RETURN_IF_ERROR(
            version->Score(samples[static_cast<size_t>(k) % samples.size()], &probs, nullptr));
        lat.push_back(Seconds(s0) * 1e3);
      }
      const double wall = Seconds(t0);
      inproc[i].p50.push_back(Percentile(lat, 0.5));
      inproc[i].p99.push_back(Percentile(lat, 0.99));
      inproc[i].rps.push_back(c.calls / wall);
      for (size_t j = 0; j < concurrency.size(); ++j) {
        TANDEM_ASSIGN_OR_RETURN(Load load, RunClients(server->port(), bodies[i], concurrency[j],
                                                      c.calls, 3, kMaxSecondsPerRun));
        served[i][j].p50.push_back(Percentile(load.latencies_ms, 0.5));
        served[i][j].p99.push_back(Percentile(load.latencies_ms, 0.99));
        served[i][j].rps.push_back(static_cast<double>(load.latencies_ms.size()) / load.seconds);
        std::fprintf(stderr,
                     "serve_bench: rep %d batch %4d c%d: served p50 %.3f p99 %.3f ms %.0f req/s "
                     "(%zu calls); in-process p50 %.3f p99 %.3f ms %.0f calls/s\n",
                     rep, c.batch, concurrency[j], served[i][j].p50.back(), served[i][j].p99.back(),
                     served[i][j].rps.back(), load.latencies_ms.size(), inproc[i].p50.back(),
                     inproc[i].p99.back(), inproc[i].rps.back());
      }
    }
  }
  server->Stop();

  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string b = "_b" + std::to_string(cases[i].batch);
    for (size_t j = 0; j < concurrency.size(); ++j) {
      const std::string bc = b + "_c" + std::to_string(concurrency[j]);
      PrintFigure("serve_p50_ms" + bc, Median(served[i][j].p50), "ms", false,
                  "inprocess_p50_ms" + b, Median(inproc[i].p50));
      PrintFigure("serve_p99_ms" + bc, Median(served[i][j].p99), "ms", false,
                  "inprocess_p99_ms" + b, Median(inproc[i].p99));
      PrintFigure("serve_rps" + bc, Median(served[i][j].rps), "req/s", true, "inprocess_rps" + b,
                  Median(inproc[i].rps));
    }
    if (cases[i].batch == 64) {
      PrintFigure("serve_p99_b64_c1_vs_target", Median(served[i][0].p99), "ms", false,
                  "2x_inprocess_p99_plus_1ms", 2 * Median(inproc[i].p99) + 1.0);
    }
  }
  std::fprintf(stderr, "serve_bench: steady state took %.1f s\n", Seconds(start));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// B. Deltas while serving

std::string DeltaJobYaml(const Args& args, const std::string& dir) {
  return ModelYaml("    vocab: " + std::to_string(kDeltaVocab) +
                   "\n    zipf: " + std::to_string(kDeltaZipf) + "\n    eval_rows: 1000\n") +
         "  steps: " + std::to_string(args.every_steps * args.checkpoints) +
         "\n  batch_size: 1024\n  threads: 1\n  log_every_steps: " +
         std::to_string(args.every_steps) +
         "\n  eval_every_steps: 0\n"
         "ps:\n  data_dir: " +
         dir + "/ps\n  storage: rocksdb\n" +
         "chief: {heartbeat_interval_ms: 200, heartbeat_timeout_ms: 5000}\n"
         "checkpoint:\n  dir: " +
         dir + "/checkpoints\n  every_steps: " + std::to_string(args.every_steps) +
         "\n  keep: 100\n  resume: never\noutput:\n  dir: " + dir + "/out\n";
}

// Committed checkpoints of `dir` (ckpt-* with a MANIFEST), ascending.
std::vector<int64_t> CommittedSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0 || !fs::exists(e.path() / "MANIFEST")) continue;
    steps.push_back(std::strtoll(name.c_str() + 5, nullptr, 10));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string Tail(const std::string& text, size_t n) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

// Waits until the server reports `step`; the time it did, or nullopt after `timeout_s`.
std::optional<Clock::time_point> WaitForStep(httplib::Client* client, int64_t step,
                                             double timeout_s) {
  const auto t0 = Clock::now();
  while (Seconds(t0) < timeout_s) {
    if (ServedStep(client) >= step) return Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

// One client posting `bodies` back to back until stopped, each post's start and latency kept.
class Background {
 public:
  Background(int port, const std::vector<std::string>* bodies) {
    thread_ = std::thread([this, port, bodies] {
      auto client = NewClient(port);
      for (size_t next = 0; !stop_.load(); ++next) {
        const auto t0 = Clock::now();
        Status s = Post(client.get(), (*bodies)[next % bodies->size()]);
        if (!s.ok()) {
          status_ = s;
          return;
        }
        posts_.push_back({t0, Clock::now()});
      }
    });
  }
  ~Background() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Stops and returns the latencies (ms) of the posts that overlapped [from, to].
  StatusOr<std::vector<double>> Stop(Clock::time_point from, Clock::time_point to) {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    TANDEM_RETURN_IF_ERROR(status_);
    std::vector<double> ms;
    for (const auto& [s, e] : posts_)
      if (s <= to && e >= from) ms.push_back(Seconds(s, e) * 1e3);
    return ms;
  }

 private:
  std::atomic<bool> stop_{false};
  Status status_ = Status::Ok();
  std::vector<std::pair<Clock::time_point, Clock::time_point>> posts_;
  std::thread thread_;
};

Status RunDelta(const Args& args) {
  const auto start = Clock::now();
  testing::TempDir dir;
  testing::WriteFile(dir.File("job.yaml"), DeltaJobYaml(args, dir.path()));
  const std::vector<std::string> argv = {
      args.tandem, "local",     "--config", dir.File("job.yaml"), "--ps",
      "2",         "--workers", "1",        "--max-restarts",     "0"};
  const auto train0 = Clock::now();
  testing::CommandResult r = testing::RunCommand(argv, {"OPENBLAS_NUM_THREADS=1"}, {"TF_CONFIG"},
                                                 std::chrono::minutes(10));
  if (r.timed_out || !r.exit.exited() || r.exit.exit_code != 0)
    return Status::Internal("tandem local " + r.exit.ToString() + "; its output ends:\n" +
                            Tail(r.output, 3000));
  const std::string ckpt = dir.File("checkpoints");
  const std::vector<int64_t> steps = CommittedSteps(ckpt);
  std::fprintf(stderr, "serve_bench: training took %.1f s, %zu checkpoints\n", Seconds(train0),
               steps.size());
  if (steps.size() < 2) return Status::Internal("fewer than 2 checkpoints in " + ckpt);

  // The follower sees one checkpoint more each time a link is added.
  const std::string stage = dir.File("stage");
  std::error_code ec;
  fs::create_directories(stage, ec);
  if (!ec) fs::create_directories(dir.File("state"), ec);
  if (!ec) fs::create_directory_symlink(ckpt + "/shards", stage + "/shards", ec);
  if (ec) return Status::Unavailable("staging " + stage + ": " + ec.message());
  auto show = [&](int64_t step) {
    const std::string name = CheckpointDirName(step);
    std::error_code e;
    fs::create_directory_symlink(ckpt + "/" + name, stage + "/" + name, e);
    return e ? Status::Unavailable("link " + name + ": " + e.message()) : Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(show(steps[0]));
  serve::ServeOptions so;
  so.follow = stage;
  so.state_dir = dir.File("state");
  so.poll_seconds = 0.05;
  so.http.host = "127.0.0.1";
  so.http.port = 0;
  so.http.model_name = kModelName;
  TANDEM_ASSIGN_OR_RETURN(auto server, serve::ServeProcess::Start(so));
  auto control = NewClient(server->port());
  if (!WaitForStep(control.get(), steps[0], 60))
    return Status::DeadlineExceeded("the follower did not serve checkpoint " +
                                    std::to_string(steps[0]) + " (without LATEST) in 60 s");

  // Requests over the job's own data distribution: hits where training wrote rows.
  const ValueSampler values = ValueSampler::Zipf(kDeltaVocab, kDeltaZipf);
  std::mt19937_64 rng(65);
  std::vector<std::string> pool;
  for (int i = 0; i < kInstancePool; ++i) pool.push_back(Instance(values, rng));
  const std::vector<std::string> bodies = Bodies(pool, 64, 64);
  TANDEM_RETURN_IF_ERROR(RunClients(server->port(), bodies, 1, 1, 20).status());
  Background steady_load(server->port(), &bodies);
  const auto steady0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> steady, steady_load.Stop(steady0, Clock::now()));

  std::vector<double> apply_s, server_s, applied, read, during;
  for (size_t i = 1; i < steps.size(); ++i) {
    const double sum0 = Metric(control.get(), "tandem_serve_update_seconds_sum");
    const double count0 = Metric(control.get(), "tandem_serve_update_seconds_count");
    const double applied0 = Metric(control.get(), "tandem_serve_delta_rows_applied_total");
    const double read0 = Metric(control.get(), "tandem_serve_delta_rows_read_total");
    const double full0 = Metric(control.get(), "tandem_serve_full_loads_total");
    Background load(server->port(), &bodies);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // requests already flowing
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(show(steps[i]));
    auto t1 = WaitForStep(control.get(), steps[i], 60);
    TANDEM_ASSIGN_OR_RETURN(std::vector<double> ms, load.Stop(t0, t1.value_or(Clock::now())));
    if (!t1)
      return Status::DeadlineExceeded("checkpoint " + std::to_string(steps[i]) +
                                      " not served in 60 s");
    apply_s.push_back(Seconds(t0, *t1));
    during.insert(during.end(), ms.begin(), ms.end());
    // The follower observes the update's time only after publishing it: wait for the count.
    double count = 0;
    for (const auto w0 = Clock::now(); count < 1 && Seconds(w0) < 5;) {
      count = Metric(control.get(), "tandem_serve_update_seconds_count") - count0;
      if (count < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server_s.push_back(
        count > 0 ? (Metric(control.get(), "tandem_serve_update_seconds_sum") - sum0) / count : 0);
    applied.push_back(Metric(control.get(), "tandem_serve_delta_rows_applied_total") - applied0);
    read.push_back(Metric(control.get(), "tandem_serve_delta_rows_read_total") - read0);
    const double full = Metric(control.get(), "tandem_serve_full_loads_total") - full0;
    std::fprintf(stderr,
                 "serve_bench: step %lld: served after %.3f s (server %.3f s, %.0f update(s)%s), "
                 "%.0f rows read, %.0f applied, %zu requests in the window, p99 %.2f ms\n",
                 static_cast<long long>(steps[i]), apply_s.back(), server_s.back(), count,
                 full > 0 ? ", OPENED WHOLE" : "", read.back(), applied.back(), ms.size(),
                 Percentile(ms, 0.99));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  server->Stop();

  const double steady_p99 = Percentile(steady, 0.99);
  std::fprintf(stderr, "serve_bench: steady batch-64 p50 %.2f p99 %.2f ms over %zu requests\n",
               Percentile(steady, 0.5), steady_p99, steady.size());
  PrintFigure("serve_delta_apply_s", Median(apply_s), "s", false, "target", 1.0);
  PrintFigure("serve_delta_apply_s_server", Median(server_s), "s", false, "target", 1.0);
  PrintFigure("serve_delta_rows_applied", Median(applied), "rows", true, "delta_rows_read",
              Median(read));
  PrintFigure("serve_p99_ms_during_update", Percentile(during, 0.99), "ms", false,
              "serve_p99_ms_b64_steady", steady_p99);
  std::fprintf(stderr, "serve_bench: deltas took %.1f s\n", Seconds(start));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// C. Start-up against table size (`--only startup`): `tandem serve --model` of a bundle with
//    kTableRows rows per table and of one with 10x as many, as processes: seconds from the start
//    to GET /ready answering 200, and the process's anonymous memory (RssAnon) after 200
//    requests. The mapped table files are not read at start-up and their pages are the kernel's
//    (RssFile), so neither figure should grow with the table.

long RssAnonKiB(pid_t pid) {
  const std::string status = testing::ReadFile("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("RssAnon:");
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + 8);
}

struct Startup {
  double seconds = 0;
  double rss_anon_mib = 0;
};

StatusOr<Startup> MeasureStartup(const Args& args, const std::string& bundle,
                                 const std::string& log) {
  SpawnOptions o;
  o.argv = {args.tandem, "serve", "--model", bundle, "--port", "0", "--host", "127.0.0.1"};
  o.output_path = log;
  o.unset_env = {"TF_CONFIG"};
  const auto t0 = Clock::now();
  TANDEM_ASSIGN_OR_RETURN(Subprocess p, Subprocess::Spawn(o));
  int port = 0;
  while (port == 0 && Seconds(t0) < 60) {
    const std::string text = testing::ReadFile(log);
    const auto at = text.find("listening on 127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(text.c_str() + at + 23);
    if (p.Wait(std::chrono::milliseconds(2)).has_value())
      return Status::Internal("tandem serve exited: " + testing::ReadFile(log));
  }
  if (port == 0) return Status::DeadlineExceeded("tandem serve did not listen within 60 s");
  httplib::Client c("127.0.0.1", port);
  c.set_tcp_nodelay(true);
  Startup r;
  for (;;) {
    auto ready = c.Get("/ready");
    if (ready && ready->status == 200) break;
    if (Seconds(t0) > 60) return Status::DeadlineExceeded("not ready within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.seconds = Seconds(t0);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    nlohmann::json inst = nlohmann::json::object();
    for (int f = 0; f < kFields; ++f) {
      char hex[20];
      std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(rng() % kTableRows));
      inst["C" + std::to_string(f + 1)] = hex;
    }
    auto res = c.Post("/v1/models/tandem:predict", nlohmann::json{{"instances", {inst}}}.dump(),
                      "application/json");
    if (!res || res->status != 200) return Status::Internal("a predict request failed");
  }
  r.rss_anon_mib = RssAnonKiB(p.pid()) / 1024.0;
  p.Signal(SIGTERM);
  p.Wait(std::chrono::milliseconds(20000));
  return r;
}

Status RunStartup(const Args& args) {
  testing::TempDir dir;
  std::vector<Startup> small, large;
  TANDEM_ASSIGN_OR_RETURN(std::string small_bundle, BuildBundle(dir.path(), kTableRows));
  TANDEM_ASSIGN_OR_RETURN(std::string large_bundle, BuildBundle(dir.path(), 10 * kTableRows));
  for (int rep = 0; rep < args.reps; ++rep) {
    // A log per process: the port is read from it, and a log is appended to.
    const std::string n = std::to_string(rep);
    TANDEM_ASSIGN_OR_RETURN(Startup a,
                            MeasureStartup(args, small_bundle, dir.File("small-" + n + ".log")));
    TANDEM_ASSIGN_OR_RETURN(Startup b,
                            MeasureStartup(args, large_bundle, dir.File("large-" + n + ".log")));
    small.push_back(a);
    large.push_back(b);
    std::fprintf(stderr, "startup rep %d: %.3f s %.1f MiB | 10x rows: %.3f s %.1f MiB\n", rep,
                 a.seconds, a.rss_anon_mib, b.seconds, b.rss_anon_mib);
  }
  auto median = [](const std::vector<Startup>& v, double Startup::*field) {
    std::vector<double> x;
    for (const auto& s : v) x.push_back(s.*field);
    return Median(x);
  };
  PrintFigure("serve_start_s_10x_rows", median(large, &Startup::seconds), "s", false,
              "serve_start_s", median(small, &Startup::seconds));
  PrintFigure("serve_rss_anon_mib_10x_rows", median(large, &Startup::rss_anon_mib), "MiB", false,
              "serve_rss_anon_mib", median(small, &Startup::rss_anon_mib));
  return Status::Ok();
}

int Main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "serve_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--only") {
      args.only = next();
    } else if (a == "--reps") {
      args.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--scale") {
      args.scale = std::atof(next().c_str());
    } else if (a == "--tandem") {
      args.tandem = next();
    } else if (a == "--every-steps") {
      args.every_steps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--checkpoints") {
      args.checkpoints = std::max(2, std::atoi(next().c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: serve_bench [--only steady|delta|startup] [--reps N] [--scale X] "
                   "[--tandem PATH] [--every-steps E] [--checkpoints K]\n");
      return 2;
    }
  }
  if (args.only != "" && args.only != "steady" && args.only != "delta" && args.only != "startup") {
    std::fprintf(stderr, "serve_bench: --only steady|delta|startup\n");
    return 2;
  }
  const auto t0 = Clock::now();
  if (args.only == "" || args.only == "startup") {
    Status s = RunStartup(args);
    if (!s.ok()) {
      std::fprintf(stderr, "serve_bench: start-up: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (args.only == "" || args.only == "steady") {
    Status s = RunSteady(args);
    if (!s.ok()) {
      std::fprintf(stderr, "serve_bench: steady state: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (args.only == "" || args.only == "delta") {
    Status s = RunDelta(args);
    if (!s.ok()) {
      std::fprintf(stderr, "serve_bench: deltas: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "serve_bench: total %.1f s\n", Seconds(t0));
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  // Logs go to stderr, and only warnings: the server's info lines are noise between the figures.
  tandem::log::Init("serve_bench", "warn");
  return tandem::bench::Main(argc, argv);
}
