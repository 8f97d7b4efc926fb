// The `tandem` command as a user meets it: help, usage errors, exit statuses (PROTOCOLS §12),
// config errors before binding, TF_CONFIG rules, SIGTERM, `local` and `status`.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <functional>
#include <thread>
#include <zmq.hpp>

#include "tests/cluster/daemon_fixture.h"
#include "worker/device/cpu/blas_kernels.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;

const std::vector<std::string> kSubcommands = {"chief",   "ps",       "worker", "local",  "drill",
                                               "datagen", "convert",  "eval",   "export", "predict",
                                               "status",  "checksum", "keys"};

CommandResult Tandem(std::vector<std::string> args, std::vector<std::string> env = {},
                     std::vector<std::string> unset = {"TF_CONFIG"}) {
  args.insert(args.begin(), TANDEM_BINARY);
  return RunCommand(args, env, unset);
}

TEST(CliTest, HelpWorksForEverySubcommand) {
  auto top = Tandem({"--help"});
  EXPECT_EQ(top.exit.exit_code, 0) << top.output;
  for (const auto& sub : kSubcommands) {
    EXPECT_NE(top.output.find(sub), std::string::npos) << "top-level help lacks " << sub;
    auto r = Tandem({sub, "--help"});
    EXPECT_EQ(r.exit.exit_code, 0) << sub << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub << ": " << r.output;
  }
}

TEST(CliTest, VersionPrintsBuildId) {
  auto r = Tandem({"--version"});
  EXPECT_EQ(r.exit.exit_code, 0);
  EXPECT_NE(r.output.find("tandem 0.1.0+g"), std::string::npos) << r.output;
}

// Which OpenBLAS kernels run, and who chose them (worker/device/cpu/blas_kernels.h); a kernel
// set pinned by the user is kept as it is, never replaced.
TEST(CliTest, VersionNamesTheOpenBlasKernelsAndKeepsAUsersPin) {
  auto r = Tandem({"--version"});
  EXPECT_EQ(r.exit.exit_code, 0);
  EXPECT_NE(r.output.find("openblas kernels: "), std::string::npos) << r.output;
  auto pinned = Tandem({"--version"}, {"OPENBLAS_CORETYPE=Haswell"});
  EXPECT_EQ(pinned.exit.exit_code, 0);
  EXPECT_NE(pinned.output.find("openblas kernels: Haswell (OPENBLAS_CORETYPE)"), std::string::npos)
      << pinned.output;
}

// OpenBLAS fell back to SSE3 on a CPU with AVX2 or AVX-512 (made so by a preloaded library that
// reports "Prescott" unless OPENBLAS_CORETYPE is set): tandem pins the better kernels and
// executes itself again, and the process that answers runs them.
TEST(CliTest, AnOpenBlasFallbackIsReplacedByTheKernelsTheCpuHas) {
  // Without a pin of the caller's (a shell that exported one would make it the user's choice).
  auto r = Tandem({"--version"}, {std::string("LD_PRELOAD=") + FAKE_OPENBLAS_CORENAME},
                  {"TF_CONFIG", "OPENBLAS_CORETYPE"});
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  const std::string better = device::PreferredBlasCore(device::DetectCpuFeatures());
  if (better.empty()) {  // an SSE-only CPU: nothing better to pin
    EXPECT_NE(r.output.find("openblas kernels: Prescott (OpenBLAS's choice"), std::string::npos)
        << r.output;
  } else {
    EXPECT_NE(r.output.find("openblas kernels: " + better +
                            " (pinned by tandem: OpenBLAS chose Prescott)"),
              std::string::npos)
        << r.output;
  }
  auto pinned = Tandem({"--version"}, {std::string("LD_PRELOAD=") + FAKE_OPENBLAS_CORENAME,
                                       "OPENBLAS_CORETYPE=Prescott"});
  EXPECT_NE(pinned.output.find("openblas kernels: Prescott (OPENBLAS_CORETYPE)"), std::string::npos)
      << "a user's pin, even to the fallback, is kept: " << pinned.output;
}

TEST(CliTest, UsageErrorsExit2) {
  EXPECT_EQ(Tandem({}).exit.exit_code, 2);
  EXPECT_EQ(Tandem({"frobnicate"}).exit.exit_code, 2);
  EXPECT_EQ(Tandem({"ps", "--no-such-flag"}).exit.exit_code, 2);
  EXPECT_EQ(Tandem({"local", "--config"}).exit.exit_code, 2);
  EXPECT_EQ(Tandem({"status", "--timeout-ms", "abc"}).exit.exit_code, 2);
}

TEST(CliTest, DatagenWritesDataWithTeacherAucAndConvertKeepsPositions) {
  TempDir dir;
  auto gen = Tandem({"datagen", "--format", "criteo", "--rows", "3000", "--seed", "5", "--out",
                     dir.File("train.tsv")});
  ASSERT_EQ(gen.exit.exit_code, 0) << gen.output;
  const size_t at = gen.output.find("teacher AUC ");
  ASSERT_NE(at, std::string::npos) << gen.output;
  EXPECT_GT(std::stod(gen.output.substr(at + 12)), 0.6) << gen.output;
  // Same seed, same bytes.
  auto again = Tandem({"datagen", "--format", "criteo", "--rows", "3000", "--seed", "5", "--out",
                       dir.File("again.tsv")});
  ASSERT_EQ(again.exit.exit_code, 0);
  EXPECT_EQ(ReadFile(dir.File("train.tsv")), ReadFile(dir.File("again.tsv")));
  // A malformed line is reported with file and line, and kept as a weight-0 record.
  std::string text = ReadFile(dir.File("train.tsv"));
  text.insert(text.find('\n') + 1, "not a criteo line\n");
  WriteFile(dir.File("bad.tsv"), text);
  auto conv = Tandem({"convert", "--in", dir.File("bad.tsv"), "--out", dir.File("bad.bin")});
  ASSERT_EQ(conv.exit.exit_code, 0) << conv.output;
  EXPECT_NE(conv.output.find("converted 3001 lines (1 malformed"), std::string::npos)
      << conv.output;
  EXPECT_NE(conv.output.find("bad.tsv:2"), std::string::npos) << conv.output;
  auto missing = Tandem({"convert", "--in", dir.File("nope.tsv"), "--out", dir.File("x.bin")});
  EXPECT_NE(missing.exit.exit_code, 0);
  EXPECT_NE(missing.output.find("nope.tsv"), std::string::npos) << missing.output;
}

// Issue 18: datagen writes multi-hot, weighted, two-label text from a job config and prints
// each task's teacher AUC; convert turns that text into binary version 2 whose records are the
// generator's (byte for byte what datagen writes as binary); `local` trains on it.
TEST(CliTest, DatagenMultiHotTextConvertsToBinaryV2AndTrains) {
  TempDir dir;
  const std::string config = dir.File("job.yaml");
  WriteFile(config,
            "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
            "  workers: [\"127.0.0.1:0\"]\n"
            "data:\n  format: text\n  train: " +
                dir.File("train.txt") +
                "\n  num_dense: 3\n  labels: [click, buy]\n"
                "  synthetic: {vocab: 200, zipf: 1.1}\n"
                "  text: {columns: [buy, I1, hist, click, I2, item, tags, I3]}\n"
                "features:\n  item: {table: items}\n"
                "  hist: {table: items, max_len: 5, pooling: mean}\n"
                "  tags: {max_len: 3, weighted: true}\n"
                "model:\n  embedding_dim: 8\n  interaction: concat\n  bottom_mlp: [16, 8]\n"
                "  top_mlp: [16, 2]\n"
                "train:\n  steps: 30\n  batch_size: 64\n  seed: 7\n  log_every_steps: 10\n"
                "  eval_every_steps: 0\n"
                "ps:\n  data_dir: " +
                dir.File("ps") +
                "\n"
                "chief:\n  heartbeat_interval_ms: 200\n  heartbeat_timeout_ms: 5000\n"
                "collective:\n  timeout_ms: 20000\n"
                "checkpoint:\n  dir: " +
                dir.File("ckpt") + "\noutput:\n  dir: " + dir.File("out") + "\n");
  auto gen = Tandem({"datagen", "--config", config, "--format", "text", "--rows", "2000", "--seed",
                     "3", "--out", dir.File("train.txt")});
  ASSERT_EQ(gen.exit.exit_code, 0) << gen.output;
  for (const std::string label : {"click", "buy"}) {
    const size_t at = gen.output.find("teacher AUC " + label + " ");
    ASSERT_NE(at, std::string::npos) << gen.output;
    EXPECT_GT(std::stod(gen.output.substr(at + 13 + label.size())), 0.55) << gen.output;
  }
  const std::string text = ReadFile(dir.File("train.txt"));
  EXPECT_NE(text.find(':'), std::string::npos) << "weighted ids are written as id:weight";
  auto direct = Tandem({"datagen", "--config", config, "--format", "binary", "--rows", "2000",
                        "--seed", "3", "--out", dir.File("direct.bin")});
  ASSERT_EQ(direct.exit.exit_code, 0) << direct.output;
  auto conv = Tandem({"convert", "--config", config, "--in", dir.File("train.txt"), "--out",
                      dir.File("train.bin")});
  ASSERT_EQ(conv.exit.exit_code, 0) << conv.output;
  EXPECT_NE(conv.output.find("converted 2000 lines (0 malformed"), std::string::npos)
      << conv.output;
  const std::string bin = ReadFile(dir.File("train.bin"));
  ASSERT_GT(bin.size(), 12u);
  EXPECT_EQ(bin[8], 2) << "binary version 2";
  EXPECT_TRUE(bin == ReadFile(dir.File("direct.bin"))) << "converted records differ from the "
                                                          "generator's";
  // Criteo TSV cannot hold this schema: a clear usage error, no file.
  auto criteo =
      Tandem({"datagen", "--config", config, "--format", "criteo", "--out", dir.File("x.tsv")});
  EXPECT_EQ(criteo.exit.exit_code, 2) << criteo.output;
  auto job = RunCommand({TANDEM_BINARY, "local", "--config", config, "--set", "data.format=binary",
                         "--set", "data.train=" + dir.File("train.bin")},
                        {}, {"TF_CONFIG"}, std::chrono::milliseconds(120000));
  EXPECT_EQ(job.exit.exit_code, 0) << job.output;
  // The default schema's file refuses this job, naming both shapes.
  auto plain =
      Tandem({"datagen", "--format", "binary", "--rows", "10", "--out", dir.File("plain.bin")});
  ASSERT_EQ(plain.exit.exit_code, 0) << plain.output;
  auto refused = RunCommand({TANDEM_BINARY, "local", "--config", config, "--set",
                             "data.format=binary", "--set", "data.train=" + dir.File("plain.bin")},
                            {}, {"TF_CONFIG"}, std::chrono::milliseconds(60000));
  EXPECT_NE(refused.exit.exit_code, 0);
  EXPECT_NE(refused.output.find("the job expects 3 dense"), std::string::npos) << refused.output;
}

TEST(CliTest, KeysWithoutAnOutputDirectoryIsAUsageError) {
  auto r = Tandem({"keys"});
  EXPECT_EQ(r.exit.exit_code, 2);
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
}

// A bad config is reported (file, key path, line) with exit 3 before any port is bound: the
// config names a port this test holds, so an attempt to bind would fail differently (exit 1).
TEST(CliTest, DaemonWithBadConfigExits3BeforeBinding) {
  TempDir dir;
  zmq::context_t ctx(1);
  zmq::socket_t held(ctx, zmq::socket_type::router);
  held.bind("tcp://127.0.0.1:0");
  std::string ep = held.get(zmq::sockopt::last_endpoint);
  std::string port = ep.substr(ep.rfind(':') + 1);
  const std::string config = dir.File("bad.yaml");
  WriteFile(config, "cluster:\n  chief: [\"127.0.0.1:" + port +
                        "\"]\n  ps: [\"127.0.0.1:0\"]\n  workers: [\"127.0.0.1:0\"]\n"
                        "train:\n  steps: 10\n  batch_sise: 4\n");
  for (const std::string role : {"chief", "ps", "worker"}) {
    const std::string ready = dir.File(role + ".ready");
    auto r = Tandem({role, "--config", config, "--task", role + ":0", "--ready-file", ready});
    EXPECT_EQ(r.exit.exit_code, 3) << role << ": " << r.output;
    EXPECT_NE(r.output.find("bad.yaml:7"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("train.batch_sise"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(ready));
  }
}

TEST(CliTest, BadSetValueExits3NamingFlag) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), LoopbackConfig(dir.path()));
  auto r = Tandem(
      {"ps", "--config", dir.File("job.yaml"), "--task", "ps:0", "--set", "train.steps=many"});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("--set train.steps=many"), std::string::npos) << r.output;
}

TEST(CliTest, MissingTaskIsUsageError) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), LoopbackConfig(dir.path()));
  auto r = Tandem({"ps", "--config", dir.File("job.yaml")});
  EXPECT_EQ(r.exit.exit_code, 2) << r.output;
}

TEST(CliTest, TfConfigConflictsExit3NamingBoth) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), LoopbackConfig(dir.path()));
  const std::string tf =
      R"(TF_CONFIG={"cluster": {"chief": ["127.0.0.1:0"], "ps": ["127.0.0.1:0", "127.0.0.1:0"], )"
      R"("worker": ["127.0.0.1:0"]}, "task": {"type": "ps", "index": 1}})";
  auto r =
      RunCommand({TANDEM_BINARY, "ps", "--config", dir.File("job.yaml"), "--task", "ps:0"}, {tf});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("ps:0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ps:1"), std::string::npos) << r.output;

  const std::string evaluator =
      R"(TF_CONFIG={"cluster": {"chief": ["127.0.0.1:0"], "ps": ["127.0.0.1:0"], "worker": ["127.0.0.1:0"], )"
      R"("evaluator": ["127.0.0.1:0"]}, "task": {"type": "evaluator", "index": 0}})";
  r = RunCommand({TANDEM_BINARY, "worker", "--config", dir.File("job.yaml")}, {evaluator});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("evaluator"), std::string::npos) << r.output;
}

TEST(CliTest, TfConfigSuppliesTaskAndClusterAndSigtermExits0) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), LoopbackConfig(dir.path()));
  const std::string tf =
      R"(TF_CONFIG={"cluster": {"chief": ["127.0.0.1:0"], "ps": ["127.0.0.1:0", "127.0.0.1:0"], )"
      R"("worker": ["127.0.0.1:0"]}, "task": {"type": "ps", "index": 1}})";
  SpawnOptions o;
  o.argv = {TANDEM_BINARY,     "ps",       "--config", dir.File("job.yaml"), "--ready-file",
            dir.File("ready"), "--job-id", kJobHex};
  o.set_env = {tf};
  o.output_path = dir.File("log");
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(WaitForFile(dir.File("ready"), milliseconds(20000))) << ReadFile(dir.File("log"));
  EXPECT_NE(ReadFile(dir.File("ready")).find("ps:1"), std::string::npos);
  p->Signal(SIGTERM);
  auto e = p->Wait(milliseconds(10000));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << e->ToString();
  const std::string log = ReadFile(dir.File("log"));
  const std::string first_line = log.substr(0, log.find('\n'));
  EXPECT_NE(first_line.find("cluster from TF_CONFIG"), std::string::npos) << log;
  EXPECT_NE(first_line.find("task from TF_CONFIG"), std::string::npos) << log;
}

// A PS or chief never opens the CUDA plugin (worker/device/cuda/cuda_plugin.h): cuBLASLt alone
// commits ~90 MiB of static data in every process that loads it, which the PS memory bound of
// configs/README.md does not have room for.
TEST(CliTest, DaemonsThatUseNoGpuLeaveTheCudaLibrariesUnloaded) {
  TempDir dir;
  Daemon chief = StartDaemon(dir, "chief", "chief:0");
  ASSERT_TRUE(chief.process.has_value());
  Daemon ps = StartDaemon(dir, "ps", "ps:0");
  ASSERT_TRUE(ps.process.has_value());
  for (Daemon* d : {&chief, &ps}) {
    const pid_t pid = d->process->pid();
    const std::string maps = ReadFile("/proc/" + std::to_string(pid) + "/maps");
    EXPECT_EQ(maps.find("tandem-cuda.so"), std::string::npos);
    EXPECT_EQ(maps.find("libcublas"), std::string::npos);
    EXPECT_EQ(maps.find("libcudnn"), std::string::npos);
    std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
    const size_t at = status.find("RssAnon:");
    ASSERT_NE(at, std::string::npos);
    const long anon_kib = std::stol(status.substr(at + 8));
    // A fresh PS with an empty table holds ~12 MiB here; with cuBLASLt it held ~100 MiB.
    EXPECT_LT(anon_kib, 64 * 1024) << status;
  }
  for (Daemon* d : {&ps, &chief}) {
    d->process->Signal(SIGTERM);
    auto e = d->process->Wait(milliseconds(20000));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0) << e->ToString() << ReadFile(d->log_path);
  }
}

// `tandem local` running whole jobs: tests/cluster/local_job_test.cc.

}  // namespace
}  // namespace tandem::testing
