// `tandem serve` as a user runs it: real processes, real HTTP clients (cpp-httplib's client over
// TCP), a real training job beside a following server. Served scores are compared bit for bit
// with `tandem predict` on the same records and model.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;

CommandResult Tandem(std::vector<std::string> args, milliseconds timeout = milliseconds(120000)) {
  args.insert(args.begin(), TANDEM_BINARY);
  return RunCommand(args, {}, {"TF_CONFIG"}, timeout);
}

std::vector<std::string> Lines(const std::string& path) {
  std::istringstream in(ReadFile(path));
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// One TSV record as a row-form instance: I1..I13 as JSON integers, C1..C26 as strings, empty
// fields left out (missing).
json Instance(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, '\t')) f.push_back(field);
  f.resize(40);
  json inst = json::object();
  for (int i = 0; i < 13; ++i)
    if (!f[1 + i].empty()) inst["I" + std::to_string(i + 1)] = std::stoll(f[1 + i]);
  for (int i = 0; i < 26; ++i)
    if (!f[14 + i].empty()) inst["C" + std::to_string(i + 1)] = f[14 + i];
  return inst;
}

bool SameFloat(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A Criteo job trained by `tandem local` (2 RocksDB shards, 1 worker), checkpointing every
// `every` steps and keeping them all; C1 admits an id on its third sight, so some ids have no
// row. Its last checkpoint is a delta (checkpoint.final_part: delta): the previous one's files
// plus each shard's change log since, which export --since, --follow and whole opens read.
// Trained once per test binary.
class Job {
 public:
  Job(int64_t steps, int64_t every) {
    for (const char* stream : {"train", "eval"}) {
      auto r = Tandem({"datagen", "--format", "criteo", "--rows",
                       stream == std::string("train") ? "20000" : "2000", "--seed", "11", "--vocab",
                       "300", "--stream", stream, "--out", dir.File(std::string(stream) + ".tsv")});
      EXPECT_EQ(r.exit.exit_code, 0) << r.output;
    }
    WriteFile(dir.File("job.yaml"), Config(steps, every));
  }
  std::string Config(int64_t steps, int64_t every) const {
    return "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
           "  workers: [\"127.0.0.1:0\"]\n"
           "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 1]\n"
           "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n"
           "    init: {dist: uniform, scale: 0.01}\n"
           "  C1:\n    admission:\n      min_count: 3\n"
           "data:\n  format: criteo\n  train: " +
           dir.File("train.tsv") + "\n  eval: " + dir.File("eval.tsv") +
           "\ntrain:\n  steps: " + std::to_string(steps) +
           "\n  batch_size: 128\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
           "  log_every_steps: 20\n  eval_every_steps: 0\n"
           "ps:\n  data_dir: " +
           dir.path() + "/ps\n  storage: rocksdb\n  cache_bytes: 1048576\n" +
           "chief:\n  heartbeat_interval_ms: 200\n  heartbeat_timeout_ms: 5000\n"
           "collective:\n  timeout_ms: 20000\n"
           "checkpoint:\n  dir: " +
           dir.path() + "/ckpt\n  every_steps: " + std::to_string(every) +
           "\n  keep: 1000\n  final_part: delta\noutput:\n  dir: " + dir.path() + "/out\n";
  }
  std::vector<std::string> LocalArgv() const {
    return {TANDEM_BINARY, "local", "--config",  dir.File("job.yaml"),
            "--ps",        "2",     "--workers", "1"};
  }
  // Exports checkpoint `step` (once) and returns its bundle directory.
  std::string Bundle(int64_t step) {
    const std::string out = dir.File("bundle-" + std::to_string(step));
    if (!fs::exists(out)) {
      char name[32];
      std::snprintf(name, sizeof name, "ckpt-%012lld", static_cast<long long>(step));
      auto r = Tandem({"export", "--checkpoint", dir.File("ckpt") + "/" + name, "--out", out});
      EXPECT_EQ(r.exit.exit_code, 0) << r.output;
    }
    return out;
  }
  // `tandem predict`'s scores of the first `n` eval records with `bundle`.
  std::vector<float> Predict(const std::string& bundle, size_t n) {
    const std::string data = dir.File("first-" + std::to_string(n) + ".tsv");
    if (!fs::exists(data)) {
      auto lines = Lines(dir.File("eval.tsv"));
      std::string text;
      for (size_t i = 0; i < n && i < lines.size(); ++i) text += lines[i] + "\n";
      WriteFile(data, text);
    }
    const std::string out = bundle + ".scores-" + std::to_string(n);
    auto r = Tandem({"predict", "--model", bundle, "--data", data, "--out", out});
    EXPECT_EQ(r.exit.exit_code, 0) << r.output;
    std::vector<float> scores;
    for (const auto& l : Lines(out)) scores.push_back(std::strtof(l.c_str(), nullptr));
    return scores;
  }
  json Instances(size_t begin, size_t end) {
    if (eval_.empty()) eval_ = Lines(dir.File("eval.tsv"));
    json a = json::array();
    for (size_t i = begin; i < end && i < eval_.size(); ++i) a.push_back(Instance(eval_[i]));
    return a;
  }

  TempDir dir;

 private:
  std::vector<std::string> eval_;
};

// A `tandem serve` process on a free port; SIGTERM and a clean exit when it goes.
class Server {
 public:
  explicit Server(std::vector<std::string> args) {
    log_ = dir_.File("serve.log");
    SpawnOptions o;
    o.argv = {TANDEM_BINARY, "serve", "--port", "0", "--host", "127.0.0.1"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.output_path = log_;
    o.unset_env = {"TF_CONFIG"};
    auto p = Subprocess::Spawn(o);
    if (!p.ok()) {
      ADD_FAILURE() << p.status().ToString();
      return;
    }
    proc_.emplace(std::move(p).value());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      const std::string text = ReadFile(log_);
      const auto at = text.find("listening on 127.0.0.1:");
      if (at != std::string::npos) {
        port_ = std::atoi(text.c_str() + at + std::strlen("listening on 127.0.0.1:"));
        return;
      }
      if (auto e = proc_->Wait(milliseconds(50)); e.has_value()) {
        exit_ = e;
        return;
      }
    }
    ADD_FAILURE() << "tandem serve did not start: " << ReadFile(log_);
  }
  ~Server() {
    if (proc_.has_value() && !exit_.has_value()) {
      proc_->Signal(SIGTERM);
      exit_ = proc_->Wait(milliseconds(20000));
      EXPECT_TRUE(exit_.has_value() && exit_->exit_code == 0)
          << (exit_ ? exit_->ToString() : "still running") << "\n"
          << ReadFile(log_);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  std::string log() const { return ReadFile(log_); }
  // Stops it with SIGTERM and returns how it ended.
  std::optional<ExitInfo> Stop() {
    proc_->Signal(SIGTERM);
    exit_ = proc_->Wait(milliseconds(20000));
    return exit_;
  }
  std::optional<ExitInfo> exited() const { return exit_; }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }

 private:
  TempDir dir_;
  std::string log_;
  std::optional<Subprocess> proc_;
  std::optional<ExitInfo> exit_;
  int port_ = 0;
};

struct Answer {
  int status = 0;
  json body;
};

Answer Post(httplib::Client& c, const std::string& path, const std::string& body) {
  auto r = c.Post(path.c_str(), body, "application/json");
  if (!r) return {-1, json()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

std::vector<float> Scores(const json& body, const char* key = "predictions") {
  std::vector<float> out;
  if (!body.is_object() || !body.contains(key)) return out;
  for (const auto& p : body[key]) out.push_back(p.at(0).get<float>());
  return out;
}

// The value of a sample line `name` (labels included) in a Prometheus scrape; -1 when absent.
double Metric(httplib::Client& c, const std::string& name) {
  auto r = c.Get("/metrics");
  if (!r) return -1;
  std::istringstream in(r->body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

constexpr int64_t kSteps = 120, kEvery = 40;

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A client writing the rest of a body the server refused and closed must not die of it.
    ::signal(SIGPIPE, SIG_IGN);
    job_ = new Job(kSteps, kEvery);
    auto r = RunCommand(job_->LocalArgv(), {}, {"TF_CONFIG"}, milliseconds(240000));
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete job_;
    job_ = nullptr;
  }
  static Job* job_;
};
Job* ServeTest::job_ = nullptr;

TEST_F(ServeTest, AnswersEqualPredictBitForBitWhateverTheBatch) {
  const int64_t last = kSteps - 1;
  const std::string bundle = job_->Bundle(last);
  const std::vector<float> want = job_->Predict(bundle, 2000);
  ASSERT_EQ(want.size(), 2000u);
  Server s({"--model", bundle});
  ASSERT_GT(s.port(), 0) << s.log();
  auto c = s.Client();
  for (size_t batch : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
    const size_t n = batch == 1 ? 150 : 2000;  // one record per request: the first 150
    std::vector<float> got;
    for (size_t i = 0; i < n; i += batch) {
      Answer a = Post(c, "/v1/models/tandem:predict",
                      json{{"instances", job_->Instances(i, i + batch)}}.dump());
      ASSERT_EQ(a.status, 200) << a.body;
      EXPECT_EQ(a.body["model_version"], std::to_string(last));
      auto scores = Scores(a.body);
      got.insert(got.end(), scores.begin(), scores.end());
    }
    ASSERT_EQ(got.size(), n);
    int differ = 0;
    for (size_t i = 0; i < n; ++i) differ += !SameFloat(got[i], want[i]);
    EXPECT_EQ(differ, 0) << "batch " << batch;
  }
  // The column form, and a version pinned in the path.
  json rows = job_->Instances(0, 10), columns = json::object();
  for (const auto& inst : rows)
    for (auto it = inst.begin(); it != inst.end(); ++it) columns[it.key()] = json::array();
  for (const auto& inst : rows)
    for (auto it = columns.begin(); it != columns.end(); ++it)
      it.value().push_back(inst.contains(it.key()) ? inst[it.key()] : json());
  Answer a = Post(c, "/v1/models/tandem/versions/" + std::to_string(last) + ":predict",
                  json{{"inputs", columns}}.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  auto cols = Scores(a.body, "outputs");
  ASSERT_EQ(cols.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_TRUE(SameFloat(cols[i], want[i])) << i;
  auto st = c.Get("/v1/models/tandem");
  ASSERT_TRUE(st);
  EXPECT_EQ(json::parse(st->body)["model_version_status"][0]["version"], std::to_string(last));
  EXPECT_EQ(c.Get("/ready")->status, 200);
  EXPECT_EQ(Metric(c, "tandem_serve_model_version"), static_cast<double>(last));
  EXPECT_GT(Metric(c, "tandem_serve_unknown_ids_total"), 0);  // C1's unadmitted ids
}

TEST_F(ServeTest, DeltaBundlesOverABaseEqualAWholeExport) {
  const std::string base = job_->Bundle(kEvery - 1);
  const std::string delta = job_->dir.File("delta");
  auto r = Tandem({"export", "--checkpoint", job_->dir.File("ckpt"), "--since",
                   std::to_string(kEvery - 1), "--out", delta});
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  // A delta holds rows only: predict refuses it.
  auto p = Tandem({"predict", "--model", delta, "--data", job_->dir.File("eval.tsv")});
  EXPECT_EQ(p.exit.exit_code, 3) << p.output;
  EXPECT_NE(p.output.find("delta bundle"), std::string::npos) << p.output;
  const std::vector<float> want = job_->Predict(job_->Bundle(kSteps - 1), 2000);
  Server s({"--model", base, "--delta", delta});
  ASSERT_GT(s.port(), 0) << s.log();
  auto c = s.Client();
  Answer a =
      Post(c, "/v1/models/tandem:predict", json{{"instances", job_->Instances(0, 2000)}}.dump());
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.body["model_version"], std::to_string(kSteps - 1));
  auto got = Scores(a.body);
  ASSERT_EQ(got.size(), want.size());
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += !SameFloat(got[i], want[i]);
  EXPECT_EQ(differ, 0);
  // A delta that does not follow its base is refused, naming both steps.
  Server wrong({"--model", job_->Bundle(2 * kEvery - 1), "--delta", delta});
  ASSERT_TRUE(wrong.exited().has_value()) << wrong.log();
  EXPECT_EQ(wrong.exited()->exit_code, 3);
  EXPECT_NE(wrong.log().find("changed after step " + std::to_string(kEvery - 1)), std::string::npos)
      << wrong.log();
}

TEST_F(ServeTest, ACheckpointWhoseTableExceedsTheCacheServesExactly) {
  // --follow on the finished job: its last checkpoint opened whole, rows read through a row
  // cache of 16 KiB per shard against ~0.5 MiB of rows.
  const std::vector<float> want = job_->Predict(job_->Bundle(kSteps - 1), 2000);
  Server s({"--follow", job_->dir.File("ckpt"), "--cache-mb", "0.015625", "--state-dir",
            job_->dir.File("state-cache")});
  ASSERT_GT(s.port(), 0) << s.log();
  auto c = s.Client();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (c.Get("/ready")->status != 200 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(milliseconds(100));
  Answer a =
      Post(c, "/v1/models/tandem:predict", json{{"instances", job_->Instances(0, 2000)}}.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  auto got = Scores(a.body);
  ASSERT_EQ(got.size(), want.size());
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += !SameFloat(got[i], want[i]);
  EXPECT_EQ(differ, 0);
}

TEST_F(ServeTest, RefusesAModelItCannotServeNamingTheFile) {
  const std::string good = job_->Bundle(kSteps - 1);
  const std::string bad = job_->dir.File("damaged-bundle");
  fs::copy(good, bad, fs::copy_options::recursive);
  // A flipped byte in a table file: found by --verify (a full read), named.
  const std::string table = bad + "/tables/C3.emb";
  std::string bytes = ReadFile(table);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
  WriteFile(table, bytes);
  Server verified({"--model", bad, "--verify"});
  ASSERT_TRUE(verified.exited().has_value()) << verified.log();
  EXPECT_EQ(verified.exited()->exit_code, 3);
  EXPECT_NE(verified.log().find("C3.emb"), std::string::npos) << verified.log();
  // A truncated dense file is found without --verify.
  const std::string dense = bad + "/dense.ckpt";
  const std::string d = ReadFile(dense);
  WriteFile(dense, d.substr(0, d.size() / 2));
  Server truncated({"--model", bad});
  ASSERT_TRUE(truncated.exited().has_value()) << truncated.log();
  EXPECT_EQ(truncated.exited()->exit_code, 3);
  EXPECT_NE(truncated.log().find("dense.ckpt"), std::string::npos) << truncated.log();
  // Flags that contradict each other: a usage error.
  auto both = Tandem({"serve", "--model", good, "--follow", job_->dir.File("ckpt")});
  EXPECT_EQ(both.exit.exit_code, 2) << both.output;
  auto none = Tandem({"serve", "--port", "0"});
  EXPECT_EQ(none.exit.exit_code, 2) << none.output;
}

TEST_F(ServeTest, EveryBadRequestGetsItsStatusAndCounter) {
  WriteFile(job_->dir.File("token"), "s3cret\n");
  Server s({"--model", job_->Bundle(kSteps - 1), "--max-instances", "10", "--max-body-mb", "0.01",
            "--token-file", job_->dir.File("token")});
  ASSERT_GT(s.port(), 0) << s.log();
  auto c = s.Client();
  const std::string path = "/v1/models/tandem:predict";
  // Without the token: 401, and /ready stays open for probes.
  EXPECT_EQ(Post(c, path, R"({"instances": [{}]})").status, 401);
  EXPECT_EQ(c.Get("/ready")->status, 200);
  c.set_bearer_token_auth("s3cret");
  struct Case {
    std::string body;
    int status;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"{\"instances\": [", 400, "malformed_json"},
      {std::string(8000, '['), 400, "malformed_json"},
      {R"({"rows": []})", 400, "wrong_shape"},
      {R"({"instances": [{"I1": 1.5}]})", 400, "wrong_type"},
      {R"({"instances": [{"C1": "not hex"}]})", 400, "bad_value"},
      {R"({"instances": [{"C99": "ab"}]})", 400, "unknown_feature"},
      {R"({"instances": []})", 400, "empty"},
      {json{{"instances",
             json::array({json::object(), json::object(), json::object(), json::object(),
                          json::object(), json::object(), json::object(), json::object(),
                          json::object(), json::object(), json::object()})}}
           .dump(),
       413, "too_many_instances"},
      {"{\"instances\": [{\"C1\": \"" + std::string(20000, 'a') + "\"}]}", 413, "body_too_large"},
  };
  std::map<std::string, int> expected;
  for (const auto& k : cases) {
    Answer a = Post(c, path, k.body);
    EXPECT_EQ(a.status, k.status) << k.reason << ": " << a.body;
    ++expected[k.reason];
  }
  EXPECT_EQ(Post(c, "/v1/models/other:predict", R"({"instances": [{}]})").status, 404);
  ++expected["model_not_found"];
  EXPECT_EQ(Post(c, "/v1/models/tandem/versions/3:predict", R"({"instances": [{}]})").status, 404);
  ++expected["version_not_found"];
  EXPECT_EQ(c.Get("/no/such/path")->status, 404);
  ++expected["not_found"];
  // The answer to a good request is unharmed by all that.
  EXPECT_EQ(Post(c, path, R"({"instances": [{"I1": 3, "C1": "68fd1e64"}]})").status, 200);
  for (const auto& [reason, n] : expected)
    EXPECT_EQ(Metric(c, "tandem_serve_errors_total{reason=\"" + reason + "\"}"), n) << reason;
  EXPECT_EQ(Metric(c, "tandem_serve_errors_total{reason=\"unauthorized\"}"), 1);
}

TEST_F(ServeTest, AHostileFloodLeavesItServingWithBoundedMemory) {
  Server s({"--model", job_->Bundle(kSteps - 1), "--max-concurrent", "2", "--read-timeout", "1",
            "--max-body-mb", "2"});
  ASSERT_GT(s.port(), 0) << s.log();
  auto probe = s.Client();
  const std::string good = json{{"instances", job_->Instances(0, 64)}}.dump();
  const auto reference = Scores(Post(probe, "/v1/models/tandem:predict", good).body);
  ASSERT_EQ(reference.size(), 64u);
  const long rss_before = ResidentKiB(s.pid());
  // 10^4 requests from 4 clients: garbage, deep nesting, wrong types, huge numbers, oversized
  // bodies, and good ones.
  const std::vector<std::string> bodies = {
      "\x01\x02garbage",
      std::string(50000, '{'),
      R"({"instances": [{"I1": [1,2,3]}]})",
      R"({"instances": [{"I1": 123456789012345678901234567890}]})",
      "{\"instances\": [{\"C1\": \"" + std::string(2 << 20, 'f') + "\"}]}",
      "{}",
      "null",
      R"({"inputs": {"I1": [1, 2], "I2": [1]}})",
      good};
  std::atomic<int> ok{0}, refused{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      auto c = s.Client();
      for (int i = 0; i < 2500; ++i) {
        const std::string& b = bodies[static_cast<size_t>(i * 7 + t) % bodies.size()];
        auto r = c.Post("/v1/models/tandem:predict", b, "application/json");
        if (!r) {
          ++failed;  // an oversized body may be cut off before it is all sent
          continue;
        }
        (r->status == 200 ? ok : refused)++;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_EQ(ok + refused + failed, 10000);
  // A client that sends half a request and stalls is cut off after --read-timeout.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const char partial[] = "POST /v1/models/tandem:predict HTTP/1.1\r\nContent-Length: 100\r\n";
  ASSERT_GT(::send(fd, partial, sizeof partial - 1, 0), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  const auto t0 = std::chrono::steady_clock::now();
  const ssize_t got = ::recv(fd, buf, sizeof buf, 0);  // 0 (closed) or an error answer
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 4.5) << "a stalled client was not cut off";
  EXPECT_GE(got, 0);
  ::close(fd);
  // Beyond --max-concurrent, 503 at once: 6 clients sending 2000 records each.
  const std::string big = json{{"instances", job_->Instances(0, 2000)}}.dump();
  std::atomic<int> overloaded{0};
  std::vector<std::thread> heavy;
  for (int t = 0; t < 6; ++t)
    heavy.emplace_back([&] {
      auto c = s.Client();
      for (int i = 0; i < 20 && overloaded == 0; ++i) {
        auto r = c.Post("/v1/models/tandem:predict", big, "application/json");
        if (r && r->status == 503) ++overloaded;
      }
    });
  for (auto& t : heavy) t.join();
  EXPECT_GT(overloaded.load(), 0);
  EXPECT_GT(Metric(probe, "tandem_serve_errors_total{reason=\"overloaded\"}"), 0);
  // Still serving, the same answers, and memory did not grow with the flood.
  const auto after = Scores(Post(probe, "/v1/models/tandem:predict", good).body);
  ASSERT_EQ(after.size(), 64u);
  for (size_t i = 0; i < 64; ++i) EXPECT_TRUE(SameFloat(after[i], reference[i]));
  const long rss_after = ResidentKiB(s.pid());
  EXPECT_LT(rss_after - rss_before, 96 * 1024) << rss_before << " KiB -> " << rss_after;
}

TEST_F(ServeTest, SigtermAnswersTheRequestsInFlightThenExits) {
  Server s({"--model", job_->Bundle(kSteps - 1)});
  ASSERT_GT(s.port(), 0) << s.log();
  const std::string big = json{{"instances", job_->Instances(0, 2000)}}.dump();
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t)
    clients.emplace_back([&] {
      auto c = s.Client();
      auto r = c.Post("/v1/models/tandem:predict", big, "application/json");
      if (r && r->status == 200 && Scores(json::parse(r->body)).size() == 2000) ++answered;
    });
  std::this_thread::sleep_for(milliseconds(30));
  auto e = s.Stop();
  for (auto& t : clients) t.join();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << e->ToString();
  // A request the server had accepted is answered; one it had not is refused by the closed
  // port, never cut off half-way.
  EXPECT_GE(answered.load(), 1);
}

TEST_F(ServeTest, HttpsWithACertificateAndKey) {
  const std::string cert = job_->dir.File("cert.pem"), key = job_->dir.File("key.pem");
  auto gen = RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                         "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1"});
  ASSERT_EQ(gen.exit.exit_code, 0)
      << "openssl (Debian's openssl package) is needed: " << gen.output;
  Server s({"--model", job_->Bundle(kSteps - 1), "--tls-cert", cert, "--tls-key", key});
  ASSERT_GT(s.port(), 0) << s.log();
  httplib::SSLClient c("127.0.0.1", s.port());
  c.set_ca_cert_path(cert.c_str());
  c.enable_server_certificate_verification(true);
  auto r = c.Post("/v1/models/tandem:predict", R"({"instances": [{"I1": 2}]})", "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  // Plain HTTP to the TLS port gets no answer.
  auto plain = s.Client();
  plain.set_read_timeout(2, 0);
  auto p = plain.Get("/ready");
  EXPECT_TRUE(!p || p->status >= 400);
}

// A training job and a following server beside it: every answer carries a committed step,
// versions never go back, each answer equals `tandem predict` on that step's checkpoint, and
// after the first checkpoint only changed rows are applied.
TEST(ServeFollowTest, FollowsATrainingJobWithExactVersionedScores) {
  Job job(400, 25);
  SpawnOptions o;
  o.argv = job.LocalArgv();
  o.output_path = job.dir.File("local.log");
  o.unset_env = {"TF_CONFIG"};
  fs::create_directories(job.dir.File("ckpt"));
  Server s({"--follow", job.dir.File("ckpt"), "--poll-seconds", "0.1"});
  ASSERT_GT(s.port(), 0) << s.log();
  auto c = s.Client();
  EXPECT_EQ(c.Get("/ready")->status, 503);  // nothing committed yet
  auto train = Subprocess::Spawn(o);
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  const std::string body = json{{"instances", job.Instances(0, 50)}}.dump();
  std::map<int64_t, std::vector<float>> seen;  // version -> its answer
  int64_t previous = -1;
  std::optional<ExitInfo> done;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(200);
  while (std::chrono::steady_clock::now() < until) {
    Answer a = Post(c, "/v1/models/tandem:predict", body);
    if (a.status == 200) {
      const int64_t v = std::stoll(a.body["model_version"].get<std::string>());
      EXPECT_GE(v, previous) << "versions went back";
      previous = v;
      auto scores = Scores(a.body);
      if (seen.count(v) != 0) {
        for (size_t i = 0; i < scores.size(); ++i)
          EXPECT_TRUE(SameFloat(scores[i], seen[v][i])) << "version " << v << " changed";
      }
      seen[v] = scores;
    } else {
      // Not ready before the first checkpoint; once serving, an update never interrupts it.
      EXPECT_EQ(a.status, 503) << a.body;
      EXPECT_EQ(previous, -1) << "an answer failed while updating: " << a.body;
    }
    if (!done) done = train->Wait(milliseconds(20));
    if (done && previous == 399) break;
  }
  ASSERT_TRUE(done.has_value()) << ReadFile(job.dir.File("local.log"));
  ASSERT_EQ(done->exit_code, 0) << ReadFile(job.dir.File("local.log"));
  EXPECT_EQ(previous, 399) << s.log();
  EXPECT_GE(seen.size(), 2u) << s.log();
  for (const auto& [v, scores] : seen) {
    const auto want = job.Predict(job.Bundle(v), 50);
    ASSERT_EQ(want.size(), scores.size());
    int differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += !SameFloat(want[i], scores[i]);
    EXPECT_EQ(differ, 0) << "version " << v;
  }
  EXPECT_EQ(Metric(c, "tandem_serve_full_loads_total"), 1) << s.log();
  EXPECT_GE(Metric(c, "tandem_serve_updates_total"), 2);
  const double applied = Metric(c, "tandem_serve_delta_rows_applied_total");
  const double read = Metric(c, "tandem_serve_delta_rows_read_total");
  EXPECT_GT(applied, 0);
  EXPECT_GE(read, applied);
  EXPECT_GE(Metric(c, "tandem_serve_update_lag_seconds"), 0);
}

}  // namespace
}  // namespace tandem::testing
