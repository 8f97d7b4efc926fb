// Bare metal (configs/systemd/): every daemon started on its own and restarted by its supervisor
// as systemd's `Restart=on-failure` with `RestartPreventExitStatus=75 2 3` does, with nothing
// else driving the job. A fault no survivor can roll forward from (both workers killed at once)
// must end, on its own, with the model of a run without the fault: the failed job's daemons
// exit for a restart and the restarted chief starts the job again from its last checkpoint.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Restarts a daemon that ended with a status systemd's units restart (not 0, 2, 3 or 75), one
// second later (RestartSec=1), and counts its starts.
class Supervisor {
 public:
  Supervisor(const TempDir& dir, std::string chief_port) : dir_(dir), chief_port_(chief_port) {}
  ~Supervisor() {
    for (auto& [task, d] : daemons_)
      if (d.p && d.p->running()) d.p->Stop(milliseconds(5000));
  }

  void Start(const std::string& role, const std::string& task) {
    Daemon& d = daemons_[task];
    d.role = role;
    SpawnOptions o;
    o.argv = {TANDEM_BINARY, role,
              "--config",    dir_.File("job.yaml"),
              "--task",      task,
              "--set",       "cluster.chief=[127.0.0.1:" + chief_port_ + "]",
              "--set",       "checkpoint.every_steps=100"};
    o.unset_env = {"TF_CONFIG"};
    o.output_path = dir_.File(task + ".log");
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << p.status();
    d.p.emplace(std::move(p).value());
    d.starts++;
    d.restart_at.reset();
  }

  // One pass: a daemon that ended is restarted (after 1 s) or left down. True while any runs
  // or waits for its restart.
  bool Tick() {
    bool alive = false;
    for (auto& [task, d] : daemons_) {
      if (d.p && d.p->running()) {
        alive = true;
        continue;
      }
      if (d.restart_at) {
        if (Clock::now() >= *d.restart_at) Start(d.role, task);
        alive = true;
        continue;
      }
      const ExitInfo& e = *d.p->exit_info();
      const bool prevented = e.exited() && (e.exit_code == 0 || e.exit_code == 2 ||
                                            e.exit_code == 3 || e.exit_code == 75);
      if (!prevented && !d.given_up) {
        d.restart_at = Clock::now() + milliseconds(1000);
        d.exits.push_back(e.ToString());
        alive = true;
      } else if (!d.given_up) {
        d.given_up = true;
        d.exits.push_back(e.ToString());
      }
    }
    return alive;
  }

  Subprocess& process(const std::string& task) { return *daemons_.at(task).p; }
  int starts(const std::string& task) const { return daemons_.at(task).starts; }
  std::string Report() const {
    std::string out;
    for (const auto& [task, d] : daemons_) {
      out += task + ": " + std::to_string(d.starts) + " start(s), exits:";
      for (const auto& e : d.exits) out += " [" + e + "]";
      out += "\n";
    }
    return out;
  }

 private:
  struct Daemon {
    std::string role;
    std::optional<Subprocess> p;
    std::optional<Clock::time_point> restart_at;
    int starts = 0;
    bool given_up = false;
    std::vector<std::string> exits;
  };
  const TempDir& dir_;
  const std::string chief_port_;
  std::map<std::string, Daemon> daemons_;
};

// A free port for the chief, which every start (and restart) binds.
std::string FreePort() {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:0");
  const std::string ep = s.get(zmq::sockopt::last_endpoint);
  return ep.substr(ep.rfind(':') + 1);
}

TEST(SupervisedRestartTest, BothWorkersKilledAtOnceTheJobRollsBackOnItsOwnToTheFaultFreeModel) {
  constexpr int64_t kSteps = 1000;
  TempDir ref;
  std::string yaml = SmallJob(ref.path(), kSteps);
  const std::string one = "  workers: [\"127.0.0.1:0\"]\n";
  yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
  WriteFile(ref.File("job.yaml"), yaml);
  auto reference = Local(ref, 1, 2, {"checkpoint.every_steps=100"});
  ASSERT_EQ(reference.exit.exit_code, 0) << reference.output;
  const std::string want =
      ReadJsonLines(ref.path() + "/out/metrics.jsonl").back()["model_checksum"].get<std::string>();

  TempDir dir;
  yaml = SmallJob(dir.path(), kSteps);
  yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
  WriteFile(dir.File("job.yaml"), yaml);
  Supervisor sup(dir, FreePort());
  sup.Start("chief", "chief:0");
  sup.Start("ps", "ps:0");
  sup.Start("worker", "worker:0");
  sup.Start("worker", "worker:1");

  // Both workers killed at once after the checkpoint of step 300 is committed.
  const std::string latest = dir.path() + "/ckpt/LATEST";
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  bool killed = false;
  while (sup.Tick()) {
    ASSERT_LT(Clock::now(), deadline) << sup.Report() << ReadFile(dir.File("chief:0.log"));
    if (!killed) {
      const auto j = nlohmann::json::parse(ReadFile(latest), nullptr, false);
      if (j.is_object() && j.value("step", -1) >= 300) {
        sup.process("worker:0").Signal(SIGKILL);
        sup.process("worker:1").Signal(SIGKILL);
        killed = true;
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_TRUE(killed) << sup.Report();
  // Everyone ended with 0 in the end, after restarts of the failed run.
  EXPECT_GE(sup.starts("chief:0"), 2) << sup.Report();
  const auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  ASSERT_FALSE(lines.empty()) << sup.Report();
  ASSERT_TRUE(lines.back().value("final", false)) << lines.back().dump() << "\n" << sup.Report();
  EXPECT_EQ(lines.back()["model_checksum"].get<std::string>(), want) << sup.Report();
}

}  // namespace
}  // namespace tandem::testing
