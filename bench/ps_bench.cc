// Parameter-server benchmark (issue: PS). Every figure is a median of several runs, printed
// as one JSON line beside a baseline measured in the same run:
//  - pull / push keys/s, 1 shard over loopback, 64k unique keys per request, dim 16 and 64, all
//    rows cached; baselines: an in-process gather/scatter from a flat array, and raw ZeroMQ
//    moving the same bytes over loopback (the figure's ratio is against the lower of the two);
//  - pull keys/s with a table 10x the cache, Zipf(1.1) keys, against in-process RocksDB
//    MultiGet of the same keys;
//  - resident bytes per cached row against the raw row size (dim 64 Adagrad, dim 16 SGD);
//  - 2 shards x 2 clients aggregate pull keys/s (clients are threads with their own sockets);
//  - push keys/s with the push log in `process` and `machine` (group 10 ms) mode against the
//    log off, and with its records written direct (O_DIRECT, the default) against buffered,
//    runs interleaved;
//  - pull and push keys/s with ps.wire_precision bf16 against fp32, runs interleaved;
//  - pull and push keys/s with CURVE on (security.keys: every frame encrypted and authenticated)
//    against the same with CURVE off, runs interleaved; and the most pull keys/s CURVE allows on
//    this machine's cores (`_curve_bound`: the CPU a key with CURVE off plus what CURVE adds to
//    raw ZeroMQ moving the same bytes), against the same CURVE-off rate;
//  - `procs`: pull and push keys/s with the shard in another process (this binary re-run as
//    `serve-shard`), against raw ZeroMQ between two processes moving the same bytes each way
//    (`serve-raw`), runs interleaved: the hot-path figures (dim 16 Adagrad, log on);
//  - `procs-io`: push keys/s with the shard in another process, its log written direct against
//    buffered, runs interleaved.
// glibc's mmap threshold is fixed (see Main).
#include <malloc.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "bench/bench_json.h"
#include "common/embedding/initializer.h"
#include "common/ps_client.h"
#include "common/slot_map.h"
#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "common/wire/curve_keys.h"
#include "server/ps/ps_service.h"
#include "server/ps/shard.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr size_t kKeys = 65536;
constexpr int kRuns = 5;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

embedding::TableSpec Table(uint32_t dim, embedding::OptimizerKind opt) {
  embedding::TableSpec t;
  t.table_id = 0;
  t.name = "C1";
  t.dim = dim;
  t.optimizer = opt;
  return t;
}

// One shard served over loopback in this process.
struct ShardServer {
  ShardServer(zmq::context_t* ctx, const std::string& dir, uint32_t dim, uint64_t cache_bytes,
              ps::Durability durability, bool log, uint32_t index = 0, uint32_t shards = 1,
              embedding::OptimizerKind opt = embedding::OptimizerKind::kAdagrad,
              bool direct_io = true) {
    ps::ShardOptions o;
    o.shard_index = index;
    o.num_shards = shards;
    o.num_workers = 1;
    o.tables = {Table(dim, opt)};
    o.dir = dir;
    o.cache_bytes = cache_bytes;
    o.durability = durability;
    o.push_log_enabled_for_bench = log;
    o.push_log_direct_io = direct_io;
    o.restore_point_every_bytes = 1ull << 40;
    shard = std::move(ps::Shard::Open(o)).value();
    wire::ServerOptions so;
    so.lanes = ps::PsLanes(2);
    server = std::make_unique<wire::RpcServer>(ctx, so, wire::Identity{});
    service = std::make_unique<ps::PsService>(shard.get(), server.get());
    service->Register();
    if (!server->Start().ok()) std::abort();
  }
  ~ShardServer() { server->Stop(); }
  std::unique_ptr<ps::Shard> shard;
  std::unique_ptr<wire::RpcServer> server;
  std::unique_ptr<ps::PsService> service;
};

PsClient MakeClient(zmq::context_t* ctx, std::vector<std::string> endpoints, uint32_t dim,
                    WirePrecision precision = WirePrecision::kFp32) {
  wire::Identity id;
  id.role = wire::Role::WORKER;
  id.incarnation = 1;
  PsClientOptions o;
  o.shards = std::move(endpoints);
  o.dims = {dim};
  o.wire_precision = precision;
  return PsClient(ctx, id, o);
}

std::vector<uint64_t> Keys(size_t n, uint64_t salt) {
  std::vector<uint64_t> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = i * 2654435761ull + salt;
  return k;
}

// Materialises every key (so later pulls hit cached rows) in pushes of <= 64k keys.
void Materialise(PsClient* c, const std::vector<uint64_t>& keys, uint32_t dim, int64_t* step) {
  for (size_t off = 0; off < keys.size(); off += kKeys) {
    size_t n = std::min(kKeys, keys.size() - off);
    std::vector<float> g(n * dim, 0.001f);
    TableGrads t{0, {keys.data() + off, n}, g};
    if (!c->Push((*step)++, {&t, 1}).ok()) std::abort();
  }
}

// The keys are distinct and said to be, as a worker's pulls of a batch's unique ids are.
double PullKeysPerSec(PsClient* c, const std::vector<uint64_t>& keys, int64_t step, int reps) {
  std::vector<std::vector<float>> rows;
  TableIds t{0, keys, /*unique=*/true};
  if (!c->Pull(step, {&t, 1}, &rows).ok()) std::abort();
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i)
    if (!c->Pull(step, {&t, 1}, &rows).ok()) std::abort();
  return keys.size() * double(reps) / Seconds(t0);
}

double PushKeysPerSec(PsClient* c, const std::vector<uint64_t>& keys, uint32_t dim, int64_t* step,
                      int reps) {
  std::vector<float> g(keys.size() * dim, 0.001f);
  TableGrads t{0, keys, g};
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i)
    if (!c->Push((*step)++, {&t, 1}).ok()) std::abort();
  return keys.size() * double(reps) / Seconds(t0);
}

// Baseline (a): gather rows of `keys` from a flat array through a hash index (what a pull must
// at least do), then scatter gradients back (what a push must at least do).
std::pair<double, double> FlatGatherScatter(const std::vector<uint64_t>& keys, uint32_t dim,
                                            int reps) {
  std::unordered_map<uint64_t, uint32_t> index;
  index.reserve(keys.size());
  for (uint32_t i = 0; i < keys.size(); ++i) index[keys[i]] = i;
  std::vector<float> table(keys.size() * dim, 0.5f), out(keys.size() * dim),
      g(keys.size() * dim, 0.001f);
  auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < keys.size(); ++i)
      std::memcpy(&out[i * dim], &table[size_t{index[keys[i]]} * dim], dim * 4);
  double gather = keys.size() * double(reps) / Seconds(t0);
  t0 = Clock::now();
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < keys.size(); ++i) {
      float* row = &table[size_t{index[keys[i]]} * dim];
      for (uint32_t j = 0; j < dim; ++j) row[j] -= 0.1f * g[i * dim + j];
    }
  double scatter = keys.size() * double(reps) / Seconds(t0);
  return {gather, scatter};
}

// The raw ZeroMQ baselines' server: a request of one frame (keys) is answered with `rows`, as a
// pull is; one of more frames (keys, gradients) with 8 bytes, as a push is. Runs until `stop`.
std::thread RawAnswerer(zmq::socket_t* server, std::atomic<bool>* stop,
                        const std::vector<float>& rows) {
  return std::thread([server, stop, &rows] {
    zmq::pollitem_t item{server->handle(), 0, ZMQ_POLLIN, 0};
    while (!*stop) {
      zmq::poll(&item, 1, milliseconds(20));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t id, part;
      (void)server->recv(id);
      int parts = 0;
      do {
        (void)server->recv(part);
        ++parts;
      } while (part.more());
      server->send(id, zmq::send_flags::sndmore);
      if (parts == 1)
        server->send(zmq::message_t(rows.data(), rows.size() * 4), zmq::send_flags::none);
      else
        server->send(zmq::message_t(8), zmq::send_flags::none);
    }
  });
}

// One raw request: the keys, then the gradients as a second frame when there are any (a push);
// waits for the reply.
void RawRequest(zmq::socket_t* client, const std::vector<uint64_t>& keys,
                std::span<const float> grads) {
  client->send(zmq::message_t(keys.data(), keys.size() * 8),
               grads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  if (!grads.empty())
    client->send(zmq::message_t(grads.data(), grads.size_bytes()), zmq::send_flags::none);
  zmq::message_t reply;
  (void)client->recv(reply);
}

// Keys/s of `request` (kKeys keys each) over `reps` timed calls after one untimed.
template <typename Request>
double RawKeysPerSec(int reps, Request request) {
  request();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) request();
  return kKeys * double(reps) / Seconds(t0);
}

// Baseline (b): raw ZeroMQ request/reply moving the bytes of a pull (keys out, rows back).
double RawZmqKeysPerSec(zmq::context_t* ctx, uint32_t dim, int reps) {
  zmq::socket_t server(*ctx, zmq::socket_type::router), client(*ctx, zmq::socket_type::dealer);
  server.bind("tcp://127.0.0.1:0");
  client.connect(server.get(zmq::sockopt::last_endpoint));
  std::atomic<bool> stop{false};
  std::vector<float> rows(kKeys * dim, 0.5f);
  std::thread t = RawAnswerer(&server, &stop, rows);
  std::vector<uint64_t> keys = Keys(kKeys, 1);
  const double v = RawKeysPerSec(reps, [&] { RawRequest(&client, keys, {}); });
  stop = true;
  t.join();
  return v;
}

// A shard whose kKeys rows are all cached, and a client of it.
struct CachedShard {
  CachedShard(zmq::context_t* ctx, uint32_t dim, bool direct_io = true)
      : server(ctx, dir.path(), dim, 1ull << 30, ps::Durability::kProcess, true, 0, 1,
               embedding::OptimizerKind::kAdagrad, direct_io),
        client(MakeClient(ctx, {server.server->endpoint()}, dim)),
        keys(Keys(kKeys, 7)) {
    Materialise(&client, keys, dim, &step);
  }
  testing::TempDir dir;
  ShardServer server;
  PsClient client;
  std::vector<uint64_t> keys;
  int64_t step = 0;
};

void CachedPullPush(zmq::context_t* ctx, uint32_t dim) {
  std::vector<double> pull, push, gather, scatter, raw;
  for (int run = 0; run < kRuns; ++run) {
    CachedShard s(ctx, dim);
    const auto& keys = s.keys;
    pull.push_back(PullKeysPerSec(&s.client, keys, s.step, 10));
    push.push_back(PushKeysPerSec(&s.client, keys, dim, &s.step, 10));
    auto [g, sc] = FlatGatherScatter(keys, dim, 10);
    gather.push_back(g);
    scatter.push_back(sc);
    raw.push_back(RawZmqKeysPerSec(ctx, dim, 10));
  }
  const std::string d = "dim" + std::to_string(dim);
  const double base_pull = std::min(Median(gather), Median(raw));
  PrintFigure("ps_pull_cached_" + d, Median(pull), "keys/s", true,
              Median(gather) < Median(raw) ? "in-process flat gather" : "raw zeromq, same bytes",
              base_pull);
  const double base_push = std::min(Median(scatter), Median(raw));
  PrintFigure(
      "ps_push_cached_" + d, Median(push), "keys/s", true,
      Median(scatter) < Median(raw) ? "in-process flat scatter (sgd)" : "raw zeromq, same bytes",
      base_push);
}

// Pushes alone into one cached shard, for profiling the push path (prints keys/s).
void PushOnly(zmq::context_t* ctx, uint32_t dim, int reps, bool direct_io) {
  CachedShard s(ctx, dim, direct_io);
  PrintFigure("ps_push_only_dim" + std::to_string(dim),
              PushKeysPerSec(&s.client, s.keys, dim, &s.step, reps), "keys/s", true, "none", 0);
}

void PullOnly(zmq::context_t* ctx, uint32_t dim, int reps) {
  CachedShard s(ctx, dim);
  PrintFigure("ps_pull_only_dim" + std::to_string(dim),
              PullKeysPerSec(&s.client, s.keys, s.step, reps), "keys/s", true, "none", 0);
}

// ps.wire_precision bf16 against fp32, runs interleaved on fresh shards: pull and push keys/s
// with half the bytes of rows and gradients on the wire.
void WirePrecisionOnOff(zmq::context_t* ctx, uint32_t dim) {
  std::vector<double> pull[2], push[2];
  for (int run = 0; run < kRuns; ++run) {
    for (int half = 0; half < 2; ++half) {
      testing::TempDir dir;
      ShardServer s(ctx, dir.path(), dim, 1ull << 30, ps::Durability::kProcess, true);
      PsClient c = MakeClient(ctx, {s.server->endpoint()}, dim,
                              half ? WirePrecision::kBf16 : WirePrecision::kFp32);
      auto keys = Keys(kKeys, 7);
      int64_t step = 0;
      Materialise(&c, keys, dim, &step);
      pull[half].push_back(PullKeysPerSec(&c, keys, step, 10));
      push[half].push_back(PushKeysPerSec(&c, keys, dim, &step, 10));
    }
  }
  const std::string d = "dim" + std::to_string(dim);
  PrintFigure("ps_pull_cached_" + d + "_bf16", Median(pull[1]), "keys/s", true,
              "the same pulls at fp32", Median(pull[0]));
  PrintFigure("ps_push_cached_" + d + "_bf16", Median(push[1]), "keys/s", true,
              "the same pushes at fp32", Median(push[0]));
}

// Zipf(1.1) sample of unique keys among n.
std::vector<uint64_t> ZipfKeys(const std::vector<uint64_t>& all, size_t want,
                               std::mt19937_64& rng) {
  std::vector<double> cdf(all.size());
  double sum = 0;
  for (size_t i = 0; i < all.size(); ++i) cdf[i] = (sum += 1.0 / std::pow(double(i + 1), 1.1));
  std::uniform_real_distribution<double> u(0, sum);
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> out;
  while (out.size() < want) {
    size_t i = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    if (seen.insert(all[i]).second) out.push_back(all[i]);
  }
  return out;
}

void UncachedZipfPull(zmq::context_t* ctx) {
  const uint32_t dim = 16;
  const uint64_t row_bytes = 16 + 4 * (dim + dim);  // adagrad
  const size_t n_rows = 1'000'000;
  const uint64_t cache = n_rows * row_bytes / 10;
  std::vector<double> ours, base;
  for (int run = 0; run < 3; ++run) {
    testing::TempDir dir;
    auto all = Keys(n_rows, 11);
    std::mt19937_64 rng(run);
    std::vector<std::vector<uint64_t>> requests;
    for (int i = 0; i < 5; ++i) requests.push_back(ZipfKeys(all, kKeys / 4, rng));
    {
      ShardServer s(ctx, dir.path() + "/shard", dim, cache, ps::Durability::kProcess, false);
      PsClient c = MakeClient(ctx, {s.server->endpoint()}, dim);
      int64_t step = 0;
      Materialise(&c, all, dim, &step);
      auto t0 = Clock::now();
      std::vector<std::vector<float>> rows;
      size_t keys = 0;
      for (const auto& r : requests) {
        TableIds t{0, r};
        if (!c.Pull(step, {&t, 1}, &rows).ok()) std::abort();
        keys += r.size();
      }
      ours.push_back(keys / Seconds(t0));
    }
    // Baseline: the same keys read with MultiGet from a RocksDB holding the same rows.
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    if (!rocksdb::DB::Open(o, dir.path() + "/raw", &raw).ok()) std::abort();
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string value(row_bytes, 'x');
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    for (size_t off = 0; off < all.size(); off += 10000) {
      rocksdb::WriteBatch b;
      for (size_t i = off; i < std::min(all.size(), off + 10000); ++i)
        b.Put(rocksdb::Slice(reinterpret_cast<const char*>(&all[i]), 8), value);
      db->Write(wo, &b);
    }
    db->Flush({});
    auto t0 = Clock::now();
    size_t keys = 0;
    for (const auto& r : requests) {
      std::vector<rocksdb::Slice> ks;
      for (const auto& k : r) ks.emplace_back(reinterpret_cast<const char*>(&k), 8);
      std::vector<rocksdb::PinnableSlice> vals(ks.size());
      std::vector<rocksdb::Status> st(ks.size());
      db->MultiGet({}, db->DefaultColumnFamily(), ks.size(), ks.data(), vals.data(), st.data());
      keys += r.size();
    }
    base.push_back(keys / Seconds(t0));
  }
  PrintFigure("ps_pull_uncached_zipf1.1_dim16", Median(ours), "keys/s", true,
              "in-process rocksdb MultiGet, same keys", Median(base));
}

void MemoryPerRow(uint32_t dim, embedding::OptimizerKind opt, const std::string& name) {
  testing::TempDir dir;
  auto spec = Table(dim, opt);
  ps::StoreOptions so;
  so.db_dir = dir.path();
  so.tables = {spec};
  so.memory_only = true;
  auto store = std::move(ps::EmbeddingStore::Open(so)).value();
  const size_t n = 200'000;
  const long before = testing::ResidentKiB(::getpid());
  auto keys = Keys(n, 3);
  for (size_t off = 0; off < n; off += kKeys) {
    std::span<const uint64_t> ids(keys.data() + off, std::min(kKeys, n - off));
    if (!store->Update(0, ids, [](size_t, embedding::RowRef, bool) {}).ok()) std::abort();
  }
  const long after = testing::ResidentKiB(::getpid());
  const double per_row = (after - before) * 1024.0 / n;
  const double raw = 4.0 * (dim + spec.state_floats());
  PrintFigure("ps_resident_bytes_per_row_" + name, per_row, "bytes", false,
              "raw row (embedding + optimizer state)", raw);
}

// `clients` threads, each with its own context and sockets, connect and warm up, then all pull
// `keys` 10 times at once: the total keys pulled over the wall time of the slowest client.
double ConcurrentPullKeysPerSec(const std::vector<std::string>& eps,
                                const std::vector<uint64_t>& keys, uint32_t dim, int clients) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&] {
      zmq::context_t own(1);
      PsClient c = MakeClient(&own, eps, dim);
      std::vector<std::vector<float>> rows;
      TableIds t{0, keys};
      if (!c.Pull(1, {&t, 1}, &rows).ok()) std::abort();
      ready++;
      while (!go) std::this_thread::yield();
      for (int r = 0; r < 10; ++r)
        if (!c.Pull(1, {&t, 1}, &rows).ok()) std::abort();
    });
  }
  while (ready < clients) std::this_thread::yield();
  const auto t0 = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  return double(clients) * 10 * keys.size() / Seconds(t0);
}

void TwoByTwo(zmq::context_t* ctx) {
  const uint32_t dim = 16;
  std::vector<double> agg;
  for (int run = 0; run < 3; ++run) {
    testing::TempDir d0, d1;
    ShardServer s0(ctx, d0.path(), dim, 1ull << 30, ps::Durability::kProcess, true, 0, 2);
    ShardServer s1(ctx, d1.path(), dim, 1ull << 30, ps::Durability::kProcess, true, 1, 2);
    std::vector<std::string> eps = {s0.server->endpoint(), s1.server->endpoint()};
    auto keys = Keys(kKeys, 5);
    {
      PsClient c = MakeClient(ctx, eps, dim);
      int64_t step = 0;
      Materialise(&c, keys, dim, &step);
    }
    agg.push_back(ConcurrentPullKeysPerSec(eps, keys, dim, 2));
  }
  std::vector<double> one;
  for (int run = 0; run < 3; ++run) {
    testing::TempDir d;
    ShardServer s(ctx, d.path(), dim, 1ull << 30, ps::Durability::kProcess, true);
    PsClient c = MakeClient(ctx, {s.server->endpoint()}, dim);
    auto keys = Keys(kKeys, 5);
    int64_t step = 0;
    Materialise(&c, keys, dim, &step);
    one.push_back(PullKeysPerSec(&c, keys, step, 10));
  }
  PrintFigure("ps_pull_2shards_2clients_dim16", Median(agg), "keys/s", true,
              "1 shard, 1 client, same run", Median(one));
}

void PushLogOverhead(zmq::context_t* ctx) {
  const uint32_t dim = 16;
  auto once = [&](ps::Durability d, bool log, bool direct) {
    testing::TempDir dir;
    ShardServer s(ctx, dir.path(), dim, 1ull << 30, d, log, 0, 1,
                  embedding::OptimizerKind::kAdagrad, direct);
    PsClient c = MakeClient(ctx, {s.server->endpoint()}, dim);
    auto keys = Keys(kKeys, 9);
    int64_t step = 0;
    Materialise(&c, keys, dim, &step);
    return PushKeysPerSec(&c, keys, dim, &step, 10);
  };
  // off, process direct, process buffered, machine direct, machine buffered
  std::vector<double> v[5];
  for (int run = 0; run < kRuns; ++run) {
    v[0].push_back(once(ps::Durability::kProcess, false, true));
    v[1].push_back(once(ps::Durability::kProcess, true, true));
    v[2].push_back(once(ps::Durability::kProcess, true, false));
    v[3].push_back(once(ps::Durability::kMachine, true, true));
    v[4].push_back(once(ps::Durability::kMachine, true, false));
  }
  const double off = Median(v[0]);
  PrintFigure("ps_push_log_process_dim16", Median(v[1]), "keys/s", true, "push log off", off);
  PrintFigure("ps_push_log_machine_group10ms_dim16", Median(v[3]), "keys/s", true, "push log off",
              off);
  PrintFigure("ps_push_log_process_direct_dim16", Median(v[1]), "keys/s", true,
              "push log written buffered", Median(v[2]));
  PrintFigure("ps_push_log_machine_direct_dim16", Median(v[3]), "keys/s", true,
              "push log written buffered", Median(v[4]));
}

// CPU seconds this process has used (every thread, user and system).
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// What `rate()` returns (keys/s of `reps` timed requests of kKeys keys after an untimed one),
// and the CPU seconds a key of all reps + 1 requests cost this process.
template <typename Rate>
std::pair<double, double> RateAndCpuPerKey(int reps, Rate rate) {
  const double cpu0 = CpuSeconds();
  const double keys_per_sec = rate();
  return {keys_per_sec, (CpuSeconds() - cpu0) / (double(reps + 1) * kKeys)};
}

// Raw ZeroMQ pulls and pushes (RawRequest) in this process, with CURVE on or off: the CPU a key
// costs libzmq and libsodium alone, whatever tandem does around them.
std::pair<double, double> RawCpuPerKey(zmq::context_t* ctx, uint32_t dim,
                                       const wire::CurveKeys* curve) {
  zmq::socket_t server(*ctx, zmq::socket_type::router), client(*ctx, zmq::socket_type::dealer);
  if (curve != nullptr) {
    server.set(zmq::sockopt::curve_server, 1);
    server.set(zmq::sockopt::curve_secretkey, curve->secret_key);
    client.set(zmq::sockopt::curve_serverkey, curve->public_key);
    client.set(zmq::sockopt::curve_publickey, curve->public_key);
    client.set(zmq::sockopt::curve_secretkey, curve->secret_key);
  }
  server.bind("tcp://127.0.0.1:0");
  client.connect(server.get(zmq::sockopt::last_endpoint));
  std::atomic<bool> stop{false};
  std::vector<float> rows(kKeys * dim, 0.5f), grads(kKeys * dim, 0.001f);
  std::thread t = RawAnswerer(&server, &stop, rows);
  const std::vector<uint64_t> keys = Keys(kKeys, 1);
  const double pull = RateAndCpuPerKey(10, [&] {
                        return RawKeysPerSec(10, [&] { RawRequest(&client, keys, {}); });
                      }).second;
  const double push = RateAndCpuPerKey(10, [&] {
                        return RawKeysPerSec(10, [&] { RawRequest(&client, keys, grads); });
                      }).second;
  stop = true;
  t.join();
  return {pull, push};
}

// Servers and clients made while the default keys are set speak CURVE (as a daemon with
// security.keys does); runs alternate so that machine noise hits both sides alike.
// Client and shard share this process, so its CPU time is both sides'. What CURVE must add to a
// key at least is what it adds to raw ZeroMQ moving the same bytes (both sides' encryption,
// decryption and libzmq's copies for them): with every core of the machine busy, a pull or push
// cannot beat (cores) / (its CPU a key with CURVE off + that), which the `_curve_bound` line
// gives for pulls against the CURVE-off rate: the best ratio this machine allows (issue 21: 0.7).
void CurveOnOff(zmq::context_t* ctx, uint32_t dim) {
  const auto keys = wire::GenerateCurveKeys();
  if (!keys.ok()) std::abort();
  std::vector<double> pull[2], push[2], pull_cpu, push_cpu, raw_pull[2], raw_push[2];
  for (int run = 0; run < kRuns; ++run) {
    for (int on = 0; on < 2; ++on) {
      wire::SetDefaultCurveKeys(on ? std::optional<wire::CurveKeys>(*keys) : std::nullopt);
      testing::TempDir dir;
      ShardServer s(ctx, dir.path(), dim, 1ull << 30, ps::Durability::kProcess, true);
      PsClient c = MakeClient(ctx, {s.server->endpoint()}, dim);
      auto k = Keys(kKeys, 7);
      int64_t step = 0;
      Materialise(&c, k, dim, &step);
      // PushKeysPerSec times all its calls: 10, counted as 9 + 1 here.
      const auto [pr, pc] = RateAndCpuPerKey(10, [&] { return PullKeysPerSec(&c, k, step, 10); });
      const auto [qr, qc] =
          RateAndCpuPerKey(9, [&] { return PushKeysPerSec(&c, k, dim, &step, 10); });
      pull[on].push_back(pr);
      push[on].push_back(qr);
      if (on == 0) {
        pull_cpu.push_back(pc);
        push_cpu.push_back(qc);
      }
    }
    for (int on = 0; on < 2; ++on) {
      const auto [p, q] = RawCpuPerKey(ctx, dim, on ? &*keys : nullptr);
      raw_pull[on].push_back(p);
      raw_push[on].push_back(q);
    }
  }
  wire::SetDefaultCurveKeys(std::nullopt);
  const std::string d = "dim" + std::to_string(dim);
  PrintFigure("ps_pull_cached_" + d + "_curve", Median(pull[1]), "keys/s", true,
              "the same pulls with CURVE off", Median(pull[0]));
  PrintFigure("ps_push_cached_" + d + "_curve", Median(push[1]), "keys/s", true,
              "the same pushes with CURVE off", Median(push[0]));
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  const double pull_crypto = std::max(0.0, Median(raw_pull[1]) - Median(raw_pull[0]));
  const double push_crypto = std::max(0.0, Median(raw_push[1]) - Median(raw_push[0]));
  // Pushes wait on the push log's device more than on the CPU (their bound is above 1 on the
  // 2-core VM), so only the pulls' is printed as a figure.
  std::fprintf(stderr,
               "ps_bench: %s, CPU a key with CURVE off: pull %.1f ns, push %.1f ns (raw ZeroMQ "
               "%.1f and %.1f); CURVE adds %.1f and %.1f ns to raw ZeroMQ; %.0f cores: pushes "
               "at most %.3g keys/s with CURVE\n",
               d.c_str(), Median(pull_cpu) * 1e9, Median(push_cpu) * 1e9, Median(raw_pull[0]) * 1e9,
               Median(raw_push[0]) * 1e9, pull_crypto * 1e9, push_crypto * 1e9, cores,
               cores / (Median(push_cpu) + push_crypto));
  PrintFigure("ps_pull_cached_" + d + "_curve_bound", cores / (Median(pull_cpu) + pull_crypto),
              "keys/s", true, "the same pulls with CURVE off", Median(pull[0]));
}

// libzmq encrypts a connection on one of its context's I/O threads, so one connection's CURVE
// throughput is one core's. Two clients (two connections, each with its own I/O thread; the
// server's context has two) pulling at once: the aggregate with CURVE on against off.
void CurveTwoConnections(zmq::context_t* ctx, uint32_t dim) {
  const auto keys = wire::GenerateCurveKeys();
  if (!keys.ok()) std::abort();
  std::vector<double> agg[2];
  for (int run = 0; run < 3; ++run) {
    for (int on = 0; on < 2; ++on) {
      wire::SetDefaultCurveKeys(on ? std::optional<wire::CurveKeys>(*keys) : std::nullopt);
      testing::TempDir dir;
      ShardServer s(ctx, dir.path(), dim, 1ull << 30, ps::Durability::kProcess, true);
      auto k = Keys(kKeys, 3);
      {
        PsClient c = MakeClient(ctx, {s.server->endpoint()}, dim);
        int64_t step = 0;
        Materialise(&c, k, dim, &step);
      }
      agg[on].push_back(ConcurrentPullKeysPerSec({s.server->endpoint()}, k, dim, 2));
    }
  }
  wire::SetDefaultCurveKeys(std::nullopt);
  PrintFigure("ps_pull_cached_dim" + std::to_string(dim) + "_curve_2clients", Median(agg[1]),
              "keys/s", true, "the same two clients with CURVE off", Median(agg[0]));
}

// --- Two processes -------------------------------------------------------------------------

// The child's side: blocks SIGTERM before any thread starts (so every thread inherits the
// mask), serves, publishes its endpoint through `file` (written whole, then renamed), and
// returns once SIGTERM arrives.
void PublishAndWaitForTerm(const std::string& endpoint, const std::string& file) {
  {
    FILE* f = std::fopen((file + ".tmp").c_str(), "w");
    if (f == nullptr) std::abort();
    std::fputs(endpoint.c_str(), f);
    std::fclose(f);
    std::filesystem::rename(file + ".tmp", file);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
}

void BlockTerm() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int ServeShard(uint32_t dim, const std::string& dir, const std::string& file, bool direct_io) {
  BlockTerm();
  zmq::context_t ctx(2);
  ShardServer s(&ctx, dir, dim, 1ull << 30, ps::Durability::kProcess, true, 0, 1,
                embedding::OptimizerKind::kAdagrad, direct_io);
  PublishAndWaitForTerm(s.server->endpoint(), file);
  return 0;
}

// Raw ZeroMQ in a process of its own (RawAnswerer).
int ServeRaw(uint32_t dim, const std::string& file) {
  BlockTerm();
  zmq::context_t ctx(2);
  zmq::socket_t server(ctx, zmq::socket_type::router);
  server.bind("tcp://127.0.0.1:0");
  std::atomic<bool> stop{false};
  std::vector<float> rows(kKeys * dim, 0.5f);
  std::thread t = RawAnswerer(&server, &stop, rows);
  PublishAndWaitForTerm(server.get(zmq::sockopt::last_endpoint), file);
  stop = true;
  t.join();
  return 0;
}

// A child running this binary in one of the serve modes, and the endpoint it published.
struct Child {
  Child(const std::vector<std::string>& args, const std::string& dir) {
    const std::string file = dir + "/endpoint";
    SpawnOptions o;
    o.argv = {SelfExecutable()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.push_back(file);
    o.output_path = dir + "/child.log";
    process.emplace(std::move(Subprocess::Spawn(o)).value());
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(file)) {
      if (Clock::now() > deadline || !process->running()) {
        std::fprintf(stderr, "ps_bench: the %s child did not start (see %s)\n", args[0].c_str(),
                     o.output_path.c_str());
        std::abort();
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    std::ifstream in(file);
    std::getline(in, endpoint);
  }
  ~Child() { process->Stop(std::chrono::seconds(10)); }
  std::optional<Subprocess> process;
  std::string endpoint;
};

// Raw ZeroMQ keys/s between two processes: pulls (keys out, rows back) and pushes (keys and
// gradients out, an acknowledgement back).
std::pair<double, double> RawZmqProcs(zmq::context_t* ctx, const std::string& endpoint,
                                      uint32_t dim, int reps) {
  zmq::socket_t client(*ctx, zmq::socket_type::dealer);
  client.connect(endpoint);
  std::vector<uint64_t> keys = Keys(kKeys, 1);
  std::vector<float> grads(kKeys * dim, 0.001f);
  return {RawKeysPerSec(reps, [&] { RawRequest(&client, keys, {}); }),
          RawKeysPerSec(reps, [&] { RawRequest(&client, keys, grads); })};
}

void TwoProcesses(zmq::context_t* ctx, uint32_t dim) {
  const std::string d = std::to_string(dim);
  std::vector<double> pull, push, raw_pull, raw_push;
  for (int run = 0; run < kRuns; ++run) {
    {
      testing::TempDir dir;
      Child shard({"serve-shard", d, dir.path() + "/shard", "direct"}, dir.path());
      PsClient c = MakeClient(ctx, {shard.endpoint}, dim);
      auto keys = Keys(kKeys, 7);
      int64_t step = 0;
      Materialise(&c, keys, dim, &step);
      pull.push_back(PullKeysPerSec(&c, keys, step, 20));
      push.push_back(PushKeysPerSec(&c, keys, dim, &step, 20));
    }
    {
      testing::TempDir dir;
      Child raw({"serve-raw", d}, dir.path());
      auto [p, q] = RawZmqProcs(ctx, raw.endpoint, dim, 20);
      raw_pull.push_back(p);
      raw_push.push_back(q);
    }
  }
  PrintFigure("ps_pull_procs_dim" + d, Median(pull), "keys/s", true,
              "raw zeromq between two processes, same bytes", Median(raw_pull));
  PrintFigure("ps_push_procs_dim" + d, Median(push), "keys/s", true,
              "raw zeromq between two processes, same bytes", Median(raw_push));
}

// Pushes (or pulls) alone with the shard in another process, for `perf record` of both.
void OneKindProcs(zmq::context_t* ctx, uint32_t dim, int reps, bool pulls) {
  testing::TempDir dir;
  Child shard({"serve-shard", std::to_string(dim), dir.path() + "/shard", "direct"}, dir.path());
  std::fprintf(stderr, "ps_bench: shard child pid %d\n", static_cast<int>(shard.process->pid()));
  PsClient c = MakeClient(ctx, {shard.endpoint}, dim);
  auto keys = Keys(kKeys, 7);
  int64_t step = 0;
  Materialise(&c, keys, dim, &step);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string d = std::to_string(dim);
  if (pulls)
    PrintFigure("ps_pull_only_procs_dim" + d, PullKeysPerSec(&c, keys, step, reps), "keys/s", true,
                "none", 0);
  else
    PrintFigure("ps_push_only_procs_dim" + d, PushKeysPerSec(&c, keys, dim, &step, reps), "keys/s",
                true, "none", 0);
}

// Push keys/s with the shard in another process, its push log written direct and buffered.
void TwoProcessesLogIo(zmq::context_t* ctx, uint32_t dim) {
  const std::string d = std::to_string(dim);
  std::vector<double> push[2];
  for (int run = 0; run < kRuns; ++run) {
    for (int direct = 1; direct >= 0; --direct) {
      testing::TempDir dir;
      Child shard({"serve-shard", d, dir.path() + "/shard", direct ? "direct" : "buffered"},
                  dir.path());
      PsClient c = MakeClient(ctx, {shard.endpoint}, dim);
      auto keys = Keys(kKeys, 7);
      int64_t step = 0;
      Materialise(&c, keys, dim, &step);
      push[direct].push_back(PushKeysPerSec(&c, keys, dim, &step, 20));
    }
  }
  PrintFigure("ps_push_procs_log_direct_dim" + d, Median(push[1]), "keys/s", true,
              "push log written buffered", Median(push[0]));
}

int Main(int argc, char** argv) {
  // glibc serves buffers above its mmap threshold with fresh mappings (page faults on every
  // byte) and raises the threshold only after freeing one: the figures then depended on which
  // sizes this process happened to free first (a push of 4.7 MB ran 2.5x slower after pulls of
  // 256 KiB frames than after pulls of one 4 MB frame). Fixed here, in the client and in the
  // children (they run Main too), so that every figure sees the same allocator.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  std::string only = argc > 1 ? argv[1] : "";
  if (only == "serve-shard" && argc == 6)
    return ServeShard(std::stoi(argv[2]), argv[3], argv[5], std::string(argv[4]) == "direct");
  if (only == "serve-raw" && argc == 4) return ServeRaw(std::stoi(argv[2]), argv[3]);
  zmq::context_t ctx(2);
  if (only.empty() || only == "procs") {
    TwoProcesses(&ctx, 16);
    TwoProcesses(&ctx, 64);
  }
  if (only.empty() || only == "procs-io") {
    TwoProcessesLogIo(&ctx, 16);
    TwoProcessesLogIo(&ctx, 64);
  }
  if (only.empty() || only == "cached") {
    CachedPullPush(&ctx, 16);
    CachedPullPush(&ctx, 64);
  }
  // For perf: no baselines, no pulls; `push-profile buffered` writes the push log buffered.
  if (only == "push-profile")
    PushOnly(&ctx, 16, 60, !(argc > 2 && std::string(argv[2]) == "buffered"));
  if (only == "pull-profile") PullOnly(&ctx, 16, 400);  // for perf: no baselines, no pushes
  // For `perf record -p` of the shard child (its pid is logged): one kind only, no baselines.
  if (only == "push-profile-procs") OneKindProcs(&ctx, 16, 300, /*pulls=*/false);
  if (only == "pull-profile-procs") OneKindProcs(&ctx, 16, 1500, /*pulls=*/true);
  if (only.empty() || only == "wire") {
    WirePrecisionOnOff(&ctx, 16);
    WirePrecisionOnOff(&ctx, 64);
  }
  if (only.empty() || only == "memory") {
    MemoryPerRow(64, embedding::OptimizerKind::kAdagrad, "dim64_adagrad");
    MemoryPerRow(16, embedding::OptimizerKind::kSgd, "dim16_sgd");
  }
  if (only.empty() || only == "uncached") UncachedZipfPull(&ctx);
  if (only.empty() || only == "2x2") TwoByTwo(&ctx);
  if (only.empty() || only == "log") PushLogOverhead(&ctx);
  if (only.empty() || only == "curve") {
    CurveOnOff(&ctx, 16);
    CurveOnOff(&ctx, 64);
    CurveTwoConnections(&ctx, 64);
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) { return tandem::bench::Main(argc, argv); }
