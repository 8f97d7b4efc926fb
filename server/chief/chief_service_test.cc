// ChiefService with real sockets in one process: the chief's RpcServer on 127.0.0.1:0 and
// ChiefClients acting as members, each with its own RpcServer answering the chief's probes.
#include "server/chief/chief_service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <thread>

#include "common/chief_client.h"
#include "common/testing/full_disk.h"
#include "common/testing/manual_time_source.h"
#include "common/testing/test_util.h"
#include "common/wire/diagnostics.h"

namespace tandem::chief {
namespace {

using std::chrono::milliseconds;
using testing::TempDir;
using testing::WriteFile;

const JobId kJob{0x1234, 0x5678};

struct Member {
  std::unique_ptr<wire::RpcServer> server;  // answers the chief's probes
  std::unique_ptr<ChiefClient> client;
};

class ChiefServiceTest : public ::testing::Test {
 protected:
  ChiefServiceTest() {
    job_.cluster.chief = {"127.0.0.1:0"};
    job_.cluster.ps = {"127.0.0.1:0"};
    job_.cluster.workers = {"127.0.0.1:0", "127.0.0.1:0"};
    job_.checkpoint.dir = dir_.path() + "/ckpt";
    job_.chief.heartbeat_interval_ms = 50;
    job_.chief.heartbeat_timeout_ms = 1000;
    job_.train.steps = 40;
  }
  ~ChiefServiceTest() override {
    members_.clear();
    StopChief();
  }

  // Starts the chief; `endpoint` binds a given address (a restart on the same port).
  void StartChief(const std::string& endpoint = "tcp://127.0.0.1:0") {
    wire::ServerOptions o;
    o.bind_endpoint = endpoint;
    o.lanes = ChiefLanes();
    wire::Identity self;
    self.job_id = kJob;
    self.role = wire::Role::CHIEF;
    // A restart binds the port its predecessor had: wait until that listener is gone.
    if (endpoint != "tcp://127.0.0.1:0") {
      ASSERT_TRUE(WaitUntilBindable(endpoint)) << endpoint;
    }
    server_ = std::make_unique<wire::RpcServer>(&context_, o, self);
    auto service = ChiefService::Create(job_, server_.get(), /*new_run=*/false, time_);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(service).value();
    service_->Register();
    const Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(service_->Start().ok());
    endpoint_ = server_->endpoint();
  }

  // libzmq closes a destroyed socket's listener on its I/O thread, so on a loaded host a new
  // bind of the same port can come first and fail (address in use). Waits (up to 10 s) until a
  // plain socket can bind the port, with SO_REUSEADDR as libzmq binds it.
  static bool WaitUntilBindable(const std::string& endpoint) {
    const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) return false;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      ::close(fd);
      if (bound) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  void StopChief() {
    if (server_) server_->Stop();
    service_.reset();
    server_.reset();
  }

  ChiefClientOptions ClientOptions(wire::Role role, uint32_t index, const std::string& address) {
    ChiefClientOptions o;
    o.chief_endpoint = endpoint_;
    o.identity.job_id = kJob;
    o.identity.role = role;
    o.identity.index = index;
    o.address = address;
    o.config_hash = job_.ComputationHash();
    o.determinism_class = "cpu-test";
    o.heartbeat_interval = milliseconds(job_.chief.heartbeat_interval_ms);
    o.call_budget = milliseconds(1000);
    return o;
  }

  // A member with its own probe-answering server, not yet registered.
  Member& NewMember(wire::Role role, uint32_t index,
                    std::function<void(ChiefClientOptions*)> edit = nullptr) {
    Member m;
    wire::ServerOptions so;
    wire::Identity id;
    id.job_id = kJob;
    id.role = role;
    id.index = index;
    m.server = std::make_unique<wire::RpcServer>(&context_, so, id);
    wire::RegisterDiagnostics(m.server.get(), 0);
    EXPECT_TRUE(m.server->Start().ok());
    ChiefClientOptions o = ClientOptions(role, index, m.server->endpoint());
    if (edit) edit(&o);
    m.client = std::make_unique<ChiefClient>(&context_, o);
    members_.push_back(std::move(m));
    return members_.back();
  }

  // Registers and lets the member's server answer probes as the issued incarnation.
  Member& Join(wire::Role role, uint32_t index, bool heartbeats = true) {
    Member& m = NewMember(role, index);
    auto reg = m.client->Register(0, milliseconds(5000));
    EXPECT_TRUE(reg.ok()) << reg.status();
    m.server->SetIdentity(m.client->identity());
    if (heartbeats) m.client->StartHeartbeats();
    return m;
  }

  void JoinAll(bool heartbeats = true) {
    ps0_ = &Join(wire::Role::PS, 0, heartbeats);
    w0_ = &Join(wire::Role::WORKER, 0, heartbeats);
    w1_ = &Join(wire::Role::WORKER, 1, heartbeats);
  }

  // Polls the view until `pred` holds; the last view either way.
  ClusterView WaitView(ChiefClient* client, std::function<bool(const ClusterView&)> pred,
                       milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    ClusterView last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto v = client->View(milliseconds(1000));
      if (v.ok()) {
        last = *v;
        if (pred(last)) return last;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return last;
  }

  static const MemberView* Find(const ClusterView& v, std::string_view role, uint32_t index) {
    for (const auto& m : v.members)
      if (config::RoleName(m.role) == role && m.index == index) return &m;
    return nullptr;
  }

  TempDir dir_;
  config::JobConfig job_;
  // What the chief decides on (before service_: it outlives the chief).
  testing::ManualTimeSource manual_time_;
  const TimeSource* time_ = TimeSource::Steady();
  zmq::context_t context_{2};
  std::unique_ptr<wire::RpcServer> server_;
  std::unique_ptr<ChiefService> service_;
  std::string endpoint_;
  std::deque<Member> members_;
  Member *ps0_ = nullptr, *w0_ = nullptr, *w1_ = nullptr;
};

TEST_F(ChiefServiceTest, RegistersMembersWithIncreasingIncarnationsAndServesTheView) {
  StartChief();
  EXPECT_EQ(service_->term(), 1u);
  EXPECT_EQ(server_->identity().term, 1u) << "replies carry the chief's term";
  JoinAll();
  EXPECT_LT(ps0_->client->identity().incarnation, w0_->client->identity().incarnation);
  EXPECT_LT(w0_->client->identity().incarnation, w1_->client->identity().incarnation);
  EXPECT_EQ(w1_->client->identity().term, 1u);
  EXPECT_EQ(w1_->client->generation(), 1u);
  auto view = w0_->client->AwaitComplete(milliseconds(5000));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(Name(view->job_state), "training");
  EXPECT_EQ(view->term, 1u);
  EXPECT_EQ(view->total_steps, 40);
  EXPECT_EQ(view->config_hash, job_.ComputationHash());
  ASSERT_EQ(view->members.size(), 4u);
  EXPECT_EQ(view->members[0].role, config::Role::kChief);
  ASSERT_EQ(view->Of(config::Role::kWorker).size(), 2u);
  EXPECT_EQ(view->Of(config::Role::kWorker)[1]->incarnation, w1_->client->identity().incarnation);
  EXPECT_EQ(view->Of(config::Role::kPs)[0]->address, ps0_->server->endpoint());
  EXPECT_EQ(Name(view->Of(config::Role::kPs)[0]->state), "up");
  EXPECT_EQ(view->Of(config::Role::kPs)[0]->determinism_class, "cpu-test");
  EXPECT_GT(view->Of(config::Role::kPs)[0]->pid, 0u);
}

TEST_F(ChiefServiceTest, DuplicateLiveRankIsRefused) {
  StartChief();
  Join(wire::Role::WORKER, 0);
  Member& twin = NewMember(wire::Role::WORKER, 0);
  auto reg = twin.client->Register(0, milliseconds(5000));
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kPermissionDenied) << reg.status();
  EXPECT_NE(reg.status().message().find("alive"), std::string::npos) << reg.status();
}

TEST_F(ChiefServiceTest, CrashedMemberIsReplacedAtOnceWhenItDoesNotAnswerAProbe) {
  job_.chief.heartbeat_timeout_ms = 30000;  // far beyond this test: only the probe can decide
  StartChief();
  Member& old = Join(wire::Role::WORKER, 0);
  old.client->StopHeartbeats();
  old.server->Stop();  // the process crashed; its supervisor starts a new one right away
  Member& fresh = NewMember(wire::Role::WORKER, 0);
  auto reg = fresh.client->Register(0, milliseconds(5000));
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_GT(reg->incarnation, old.client->identity().incarnation);
  EXPECT_EQ(reg->generation, 2u) << "a replaced worker counts as lost";
  EXPECT_TRUE(old.client->HeartbeatNow(milliseconds(2000)).IsAborted());
}

TEST_F(ChiefServiceTest, ConfigHashMismatchIsRefusedNamingBoth) {
  StartChief();
  Member& m = NewMember(wire::Role::PS, 0,
                        [](ChiefClientOptions* o) { o->config_hash = "deadbeefdeadbeef"; });
  auto reg = m.client->Register(0, milliseconds(5000));
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(reg.status().message().find("deadbeefdeadbeef"), std::string::npos) << reg.status();
  EXPECT_NE(reg.status().message().find(job_.ComputationHash()), std::string::npos) << reg.status();
}

TEST_F(ChiefServiceTest, StrictDeterminismRefusesAnotherClass) {
  StartChief();
  Join(wire::Role::WORKER, 0);
  Member& m = NewMember(wire::Role::WORKER, 1,
                        [](ChiefClientOptions* o) { o->determinism_class = "cuda-sm90"; });
  auto reg = m.client->Register(0, milliseconds(5000));
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(reg.status().message().find("cuda-sm90"), std::string::npos) << reg.status();
  EXPECT_NE(reg.status().message().find("cpu-test"), std::string::npos) << reg.status();
}

TEST_F(ChiefServiceTest, RelaxedDeterminismAcceptsAnotherClass) {
  job_.train.deterministic = "relaxed";
  StartChief();
  Join(wire::Role::WORKER, 0);
  Member& m = NewMember(wire::Role::WORKER, 1,
                        [](ChiefClientOptions* o) { o->determinism_class = "cuda-sm90"; });
  auto reg = m.client->Register(0, milliseconds(5000));
  EXPECT_TRUE(reg.ok()) << reg.status();
}

// Detection must come within heartbeat_timeout + probe budget + one monitor tick; slack covers
// a loaded machine and the view polling.
TEST_F(ChiefServiceTest, SilentMemberThatIgnoresProbesIsLostInTime) {
  StartChief();
  JoinAll();
  ASSERT_TRUE(w1_->client->AwaitComplete(milliseconds(5000)).ok());
  const auto bound = milliseconds(job_.chief.heartbeat_timeout_ms + 500 + 25 + 1500);
  w1_->client->StopHeartbeats();
  w1_->server->Stop();  // no answer to the probe either: as if the process hung or died
  const auto stopped = std::chrono::steady_clock::now();
  auto view = WaitView(
      w0_->client.get(),
      [](const ClusterView& v) { return Name(Find(v, "worker", 1)->state) == "lost"; }, bound);
  const auto took = std::chrono::steady_clock::now() - stopped;
  const MemberView* lost = Find(view, "worker", 1);
  ASSERT_NE(lost, nullptr);
  ASSERT_EQ(Name(lost->state), "lost") << "not declared lost within " << bound.count() << " ms";
  EXPECT_LE(took, bound);
  EXPECT_NE(lost->lost_reason.find("no heartbeat for"), std::string::npos) << lost->lost_reason;
  EXPECT_NE(lost->lost_reason.find("no answer to a probe"), std::string::npos);
  EXPECT_EQ(view.generation, 2u) << "a lost worker raises the generation";
  EXPECT_EQ(Name(Find(view, "worker", 0)->state), "up");
  EXPECT_EQ(Name(Find(view, "ps", 0)->state), "up");
  EXPECT_FALSE(view.Complete());
}

TEST_F(ChiefServiceTest, SilentMemberThatAnswersProbesIsKept) {
  StartChief();
  JoinAll();
  ps0_->client->StopHeartbeats();  // its server still answers the chief's probes
  std::this_thread::sleep_for(milliseconds(3 * job_.chief.heartbeat_timeout_ms));
  auto view = w0_->client->View(milliseconds(2000));
  ASSERT_TRUE(view.ok()) << view.status();
  const MemberView* ps = Find(*view, "ps", 0);
  EXPECT_EQ(Name(ps->state), "up") << ps->lost_reason;
  EXPECT_GE(ps->ms_since_heartbeat, 2 * job_.chief.heartbeat_timeout_ms);
  EXPECT_EQ(view->generation, 1u);
}

TEST_F(ChiefServiceTest, ReplacedIncarnationIsFenced) {
  StartChief();
  JoinAll();
  Member* old = w1_;
  old->client->StopHeartbeats();
  old->server->Stop();
  auto view = WaitView(
      w0_->client.get(),
      [](const ClusterView& v) { return Name(Find(v, "worker", 1)->state) == "lost"; },
      milliseconds(8000));
  ASSERT_EQ(Name(Find(view, "worker", 1)->state), "lost");
  Member& fresh = Join(wire::Role::WORKER, 1);
  EXPECT_GT(fresh.client->identity().incarnation, old->client->identity().incarnation);
  EXPECT_FALSE(old->client->fenced());
  Status s = old->client->HeartbeatNow(milliseconds(2000));
  EXPECT_TRUE(s.IsAborted()) << s;
  EXPECT_TRUE(old->client->fenced());
  // Every worker is present again: the generation rises a second time.
  view = WaitView(
      w0_->client.get(), [](const ClusterView& v) { return v.generation == 3; },
      milliseconds(5000));
  EXPECT_EQ(view.generation, 3u);
  EXPECT_TRUE(view.Complete());
}

TEST_F(ChiefServiceTest, RestartedChiefHasANewTermAndMembersRegisterAgainKeepingIncarnations) {
  StartChief();
  JoinAll();
  const uint64_t inc = w0_->client->identity().incarnation;
  const std::string endpoint = endpoint_;
  StopChief();
  std::this_thread::sleep_for(milliseconds(300));  // heartbeats fail meanwhile
  StartChief(endpoint);
  EXPECT_EQ(service_->term(), 2u);
  // The restarted chief answers the running members' heartbeats RETRY; they register again.
  auto view = WaitView(
      ps0_->client.get(),
      [](const ClusterView& v) {
        return Name(Find(v, "worker", 0)->state) != "starting" &&
               Name(Find(v, "ps", 0)->state) != "starting";
      },
      milliseconds(5000));
  EXPECT_EQ(view.term, 2u);
  EXPECT_EQ(Find(view, "worker", 0)->incarnation, inc);
  EXPECT_EQ(w0_->client->identity().term, 2u);
  EXPECT_FALSE(w0_->client->fenced());
}

// A chief restarted into an open run waits a grace for the run's survivors; a new process that
// comes first is told to retry until the grace is over, then starts the job (PROTOCOLS §10). The
// chief's time is moved by hand: no sleep, and nothing depends on how fast this host is.
TEST_F(ChiefServiceTest, ANewProcessBeforeAnySurvivorWaitsOutTheGraceThenStartsTheJob) {
  time_ = &manual_time_;
  StartChief();
  JoinAll(/*heartbeats=*/false);
  const std::string endpoint = endpoint_;
  StopChief();  // killed, not closed: the run stays open and the next chief rejoins it
  StartChief(endpoint);
  Member& fresh = NewMember(wire::Role::PS, 0);
  auto early = fresh.client->Register(0, milliseconds(500));
  EXPECT_FALSE(early.ok()) << "registered before the survivors' grace was over";
  manual_time_.Advance(
      milliseconds(std::max<int64_t>(1000, job_.chief.heartbeat_timeout_ms / 2) + 1));
  // Well inside the grace on the real clock: only the chief's own time can let it in.
  auto late = fresh.client->Register(0, milliseconds(300));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(service_->fatal().ok()) << service_->fatal();
  EXPECT_EQ(late->term, 2u);
}

TEST_F(ChiefServiceTest, RegisterWaitsForAChiefThatIsNotUpYet) {
  StartChief();
  const std::string endpoint = endpoint_;
  StopChief();
  Member& m = NewMember(wire::Role::PS, 0);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(400));
    StartChief(endpoint);
  });
  auto reg = m.client->Register(0, milliseconds(8000));
  later.join();
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->term, 2u);
}

TEST_F(ChiefServiceTest, BarrierReleasesEveryParkedMemberOnlyWhenTheCountIsReached) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  std::atomic<int> released{0};
  std::vector<Status> results(2);
  std::vector<std::thread> early;
  for (int i = 0; i < 2; ++i) {
    Member* m = i == 0 ? w0_ : w1_;
    early.emplace_back([&, m, i] {
      results[i] = m->client->Barrier("gen1/ready", 3, milliseconds(10000));
      released++;
    });
  }
  // Long enough for the parked requests to be answered NOT_READY and sent again.
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_EQ(released.load(), 0) << "released before the third member entered";
  Status last = ps0_->client->Barrier("gen1/ready", 3, milliseconds(10000));
  EXPECT_TRUE(last.ok()) << last;
  for (auto& t : early) t.join();
  EXPECT_EQ(released.load(), 2);
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  // Entering a completed barrier again returns at once.
  EXPECT_TRUE(w0_->client->Barrier("gen1/ready", 3, milliseconds(2000)).ok());
  // A different count for the same name is a bug in the caller.
  EXPECT_TRUE(w0_->client->Barrier("gen1/ready", 2, milliseconds(2000)).IsInvalidArgument());
}

TEST_F(ChiefServiceTest, BarrierCountsMembersNotRequests) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  // The same member entering twice does not complete a barrier of two.
  Status once = w0_->client->Barrier("twice", 2, milliseconds(700));
  EXPECT_TRUE(once.IsDeadlineExceeded()) << once;
  Status again = w0_->client->Barrier("twice", 2, milliseconds(700));
  EXPECT_TRUE(again.IsDeadlineExceeded()) << again;
  EXPECT_TRUE(w1_->client->Barrier("twice", 2, milliseconds(2000)).ok());
  EXPECT_TRUE(w0_->client->Barrier("twice", 2, milliseconds(2000)).ok());
}

TEST_F(ChiefServiceTest, KvSetAndGet) {
  StartChief();
  Member& m = Join(wire::Role::WORKER, 0, false);
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(m.client->KvSet("gen1/rank0", binary).ok());
  auto got = m.client->KvGet("gen1/rank0");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, binary);
  auto missing = m.client->KvGet("gen1/rank1");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE(m.client->KvSet("gen1/rank0", "other").ok());
  EXPECT_EQ(**m.client->KvGet("gen1/rank0"), "other");
  ASSERT_TRUE(m.client->KvSet("empty", "").ok());
  auto empty = m.client->KvGet("empty");
  ASSERT_TRUE(empty.ok() && empty->has_value());
  EXPECT_EQ(**empty, "");
}

// On a full disk (the file-size limit here) the rendezvous store is kept in memory: a set is
// answered and read back (failing it failed every rendezvous, so the job), and the store is
// written again by the next set once there is space.
TEST_F(ChiefServiceTest, KvSetOnAFullDiskIsKeptInMemoryAndWrittenOnceThereIsSpace) {
  StartChief();
  Member& m = Join(wire::Role::WORKER, 0, false);
  const std::string path = job_.checkpoint.dir + "/chief/kv";
  {
    testing::FullDisk disk;
    Status set = m.client->KvSet("gen1/rank0", "address of rank 0, longer than 16 bytes");
    ASSERT_TRUE(set.ok()) << set;
    auto got = m.client->KvGet("gen1/rank0");
    ASSERT_TRUE(got.ok() && got->has_value()) << got.status();
    EXPECT_EQ(**got, "address of rank 0, longer than 16 bytes");
  }
  if (std::filesystem::exists(path)) {
    EXPECT_EQ(testing::ReadFile(path).find("gen1/rank0"), std::string::npos);
  }
  ASSERT_TRUE(m.client->KvSet("gen1/rank1", "b").ok());
  const std::string saved = testing::ReadFile(path);
  EXPECT_NE(saved.find("gen1/rank0"), std::string::npos) << saved;
  EXPECT_NE(saved.find("gen1/rank1"), std::string::npos) << saved;
}

TEST_F(ChiefServiceTest, StopGoesThroughStoppingToStoppedAndTheChiefFinishes) {
  StartChief();
  JoinAll();
  Progress training;
  training.state = MemberState::kTraining;
  for (Member* m : {ps0_, w0_, w1_}) m->client->SetProgress(training);
  auto state = w0_->client->StopJob("test stop");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(Name(*state), "stopping");
  for (Member* m : {ps0_, w0_, w1_}) {
    auto v = WaitView(
        m->client.get(), [&](const ClusterView&) { return m->client->stop_requested(); },
        milliseconds(3000));
    EXPECT_TRUE(m->client->stop_requested());
  }
  EXPECT_EQ(Name(w1_->client->job_state()), "stopping");
  Progress stopped;
  stopped.state = MemberState::kStopped;
  w0_->client->SetProgress(stopped);
  w1_->client->SetProgress(stopped);
  auto view = WaitView(
      ps0_->client.get(), [](const ClusterView& v) { return Name(v.job_state) == "stopped"; },
      milliseconds(3000));
  EXPECT_EQ(Name(view.job_state), "stopped");
  EXPECT_EQ(view.detail, "test stop");
  // The PS still runs: the chief does not finish until it has stopped too.
  EXPECT_EQ(Name(service_->WaitFinished(std::chrono::steady_clock::now() + milliseconds(300))),
            "stopped");
  ASSERT_FALSE(service_->Snapshot().members.empty());
  EXPECT_EQ(Name(service_->Snapshot().members[0].state), "training");  // ps 0
  ps0_->client->SetProgress(stopped);
  EXPECT_TRUE(ps0_->client->HeartbeatNow(milliseconds(2000)).ok());
  for (Member* m : {ps0_, w0_, w1_}) m->client->StopHeartbeats();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Name(service_->WaitFinished(start + milliseconds(10000))), "stopped");
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(9000));
}

// The chief's wait for its members to leave ends when it is told to give up (chief_main: a stop
// signal while it waits), not only at its deadline: a supervisor rolling a failed job back does
// not wait for it.
TEST_F(ChiefServiceTest, TheWaitForTheMembersToLeaveEndsWhenItIsToldToGiveUp) {
  StartChief();
  JoinAll();
  Progress training;
  training.state = MemberState::kTraining;
  for (Member* m : {ps0_, w0_, w1_}) m->client->SetProgress(training);
  ASSERT_TRUE(w0_->client->StopJob("test stop").ok());
  // Nobody has stopped: without give_up the wait lasts until its deadline, 20 s from now.
  const auto until = std::chrono::steady_clock::now() + milliseconds(20000);
  int asked = 0;
  EXPECT_EQ(Name(service_->WaitFinished(until, [&] { return ++asked >= 3; })), "stopping");
  EXPECT_EQ(asked, 3);
  EXPECT_LT(std::chrono::steady_clock::now(), until);
}

TEST_F(ChiefServiceTest, DoneByEveryWorkerEndsTheJobWithRankZerosResult) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  Progress done;
  done.state = MemberState::kDone;
  done.step = 40;
  done.loss = 0.3;
  done.auc = 0.71;
  done.logloss = 0.45;
  done.teacher_auc = 0.8;
  done.model_checksum = "0123456789abcdef0123456789abcdef";
  done.detail = "metrics in out/metrics.jsonl";
  w0_->client->SetProgress(done);
  Progress other = done;
  other.loss = 7;
  other.auc = 0.2;
  other.model_checksum = "ffff";
  w1_->client->SetProgress(other);
  ASSERT_TRUE(w0_->client->HeartbeatNow(milliseconds(2000)).ok());
  EXPECT_FALSE(w0_->client->stop_requested());
  ASSERT_TRUE(w1_->client->HeartbeatNow(milliseconds(2000)).ok());
  EXPECT_EQ(Name(w1_->client->job_state()), "done");
  auto view = ps0_->client->View(milliseconds(2000));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(Name(view->job_state), "done");
  EXPECT_DOUBLE_EQ(view->loss, 0.3);
  EXPECT_DOUBLE_EQ(view->auc, 0.71);
  EXPECT_DOUBLE_EQ(view->logloss, 0.45);
  EXPECT_DOUBLE_EQ(view->teacher_auc, 0.8);
  EXPECT_EQ(view->model_checksum, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(view->detail, "metrics in out/metrics.jsonl");
  EXPECT_EQ(view->step, 40);
  // The PS learns from its next heartbeat that it should stop.
  ASSERT_TRUE(ps0_->client->HeartbeatNow(milliseconds(2000)).ok());
  EXPECT_TRUE(ps0_->client->stop_requested());
}

TEST_F(ChiefServiceTest, FailedWorkerFailsTheJob) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  Progress failed;
  failed.state = MemberState::kFailed;
  failed.detail = "data: 3% bad records";
  w1_->client->SetProgress(failed);
  ASSERT_TRUE(w1_->client->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_TRUE(w0_->client->HeartbeatNow(milliseconds(2000)).ok());
  EXPECT_TRUE(w0_->client->stop_requested());
  EXPECT_EQ(Name(w0_->client->job_state()), "failed");
  auto view = ps0_->client->View(milliseconds(2000));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(Name(view->job_state), "failed");
  EXPECT_NE(view->detail.find("data: 3% bad records"), std::string::npos) << view->detail;
  EXPECT_NE(view->detail.find("worker:1"), std::string::npos) << view->detail;
}

TEST_F(ChiefServiceTest, MalformedRequestsAreInvalidAndTheChiefKeepsServing) {
  StartChief();
  wire::Identity tool;
  tool.job_id = kJob;
  tool.role = wire::Role::TOOL;
  wire::RpcClient client(&context_, tool);
  auto h = client.Connect(endpoint_);
  ASSERT_TRUE(h.ok());
  auto call = [&](const wire::Identity& id, std::function<void(wire::Envelope::Body::Builder)> f) {
    client.SetIdentity(id);
    wire::OutMessage m;
    f(m.envelope().getBody());
    auto r = client.Call(*h, std::move(m), milliseconds(2000));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->reply_code() : wire::ReplyCode::INTERNAL;
  };
  auto reg = [](wire::Envelope::Body::Builder b) {
    b.initRegisterRequest().setAddress("tcp://127.0.0.1:1");
  };
  EXPECT_EQ(call(tool, reg), wire::ReplyCode::INVALID) << "a tool is not a member";
  wire::Identity worker9 = tool;
  worker9.role = wire::Role::WORKER;
  worker9.index = 9;
  EXPECT_EQ(call(worker9, reg), wire::ReplyCode::INVALID) << "index beyond the cluster";
  EXPECT_EQ(call(worker9, [](auto b) { b.initHeartbeat(); }), wire::ReplyCode::INVALID);
  wire::Identity worker0 = worker9;
  worker0.index = 0;
  EXPECT_EQ(call(worker0, [](auto b) { b.initRegisterRequest(); }), wire::ReplyCode::INVALID)
      << "no address";
  // A member state this build does not know, or none at all, is refused, never taken for one.
  EXPECT_EQ(call(worker0,
                 [](auto b) { b.initHeartbeat().setState(static_cast<wire::MemberState>(999)); }),
            wire::ReplyCode::INVALID);
  EXPECT_EQ(call(worker0, [](auto b) { b.initHeartbeat().setStep(1); }), wire::ReplyCode::INVALID)
      << "no state";
  EXPECT_EQ(call(tool, [](auto b) { b.initBarrierRequest().setCount(2); }),
            wire::ReplyCode::INVALID);
  EXPECT_EQ(call(tool, [](auto b) { b.initBarrierRequest().setName("x"); }),
            wire::ReplyCode::INVALID)
      << "count 0";
  EXPECT_EQ(call(tool, [](auto b) { b.initKvSet(); }), wire::ReplyCode::INVALID);
  EXPECT_EQ(call(tool, [](auto b) { b.initKvGet(); }), wire::ReplyCode::INVALID);
  EXPECT_EQ(call(tool, [](auto b) { b.initClusterStatusRequest(); }), wire::ReplyCode::OK);
  auto regroup = [](auto b) { b.initRegroupRequest().setGeneration(1); };
  EXPECT_EQ(call(tool, regroup), wire::ReplyCode::INVALID) << "a regroup is a worker's";
  EXPECT_EQ(call(worker9, regroup), wire::ReplyCode::INVALID) << "index beyond the cluster";
  EXPECT_EQ(call(worker0, regroup), wire::ReplyCode::STALE) << "not a registered incarnation";
  Member& w = Join(wire::Role::WORKER, 0, false);
  auto v = w.client->View(milliseconds(2000));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->generation, 1u) << "no request changed the generation";
}

// Both workers of a group that broke with nobody lost ask: one new generation, announced to
// every member with its heartbeats.
TEST_F(ChiefServiceTest, RegroupRequestsOfOneBrokenGroupOpenOneGeneration) {
  StartChief();
  JoinAll();
  ASSERT_TRUE(w0_->client->AwaitComplete(milliseconds(5000)).ok());
  std::this_thread::sleep_for(milliseconds(300));  // every worker heartbeats meanwhile
  auto first = w0_->client->Regroup(1, "test: the group broke", milliseconds(2000));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->raised) << first->why_not;
  EXPECT_EQ(first->generation, 2u);
  auto second = w1_->client->Regroup(1, "test: the group broke", milliseconds(2000));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->raised);
  EXPECT_EQ(second->generation, 2u);
  const ClusterView v = WaitView(
      ps0_->client.get(), [](const ClusterView& v) { return v.generation == 2; },
      milliseconds(3000));
  EXPECT_EQ(v.generation, 2u);
  EXPECT_FALSE(v.generation_pending);
  EXPECT_TRUE(v.Complete());
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
  while (ps0_->client->generation() != 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(ps0_->client->generation(), 2u) << "heartbeats announce it";
}

TEST_F(ChiefServiceTest, TermIncrementsAcrossRestartsAndACorruptStateIsAnError) {
  StartChief();
  EXPECT_EQ(service_->term(), 1u);
  StopChief();
  StartChief();
  EXPECT_EQ(service_->term(), 2u);
  StopChief();
  const std::string path = job_.checkpoint.dir + "/chief/state";
  WriteFile(path, "not json");
  wire::RpcServer server(&context_, wire::ServerOptions{}, wire::Identity{});
  auto service = ChiefService::Create(job_, &server);
  ASSERT_FALSE(service.ok());
  EXPECT_TRUE(service.status().IsDataLoss()) << service.status();
  EXPECT_NE(service.status().message().find(path), std::string::npos) << service.status();
}

// A chief killed after the job ended, before the PS heard it: its successor still says "done",
// with worker 0's result, so the PS (and `tandem local`) end normally; the workers are gone.
TEST_F(ChiefServiceTest, ChiefRestartedAfterTheJobEndedTellsThePsItIsDone) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  Progress done;
  done.state = MemberState::kDone;
  done.step = 39;
  done.model_checksum = "0123456789abcdef0123456789abcdef";
  w0_->client->SetProgress(done);
  w1_->client->SetProgress(done);
  ASSERT_TRUE(w0_->client->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_TRUE(w1_->client->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_EQ(Name(service_->job_state()), "done");
  const std::string endpoint = endpoint_;
  StopChief();  // as kill -9: the run stays open
  StartChief(endpoint);
  EXPECT_EQ(service_->term(), 2u);
  EXPECT_EQ(Name(service_->job_state()), "done");
  // The PS's heartbeat is answered RETRY; it registers again and hears the job is done.
  Status s = ps0_->client->HeartbeatNow(milliseconds(2000));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(ps0_->client->stop_requested());
  EXPECT_EQ(Name(ps0_->client->job_state()), "done");
  auto view = ps0_->client->View(milliseconds(2000));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->model_checksum, "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(view->term, 2u);
}

// The chief commits a checkpoint after its restart with its new term, and a finished job that a
// restarted chief rejoins is not refused, while a job start (the run closed) is.
TEST_F(ChiefServiceTest, RestartedChiefCommitsWithItsTermAndOnlyAJobStartRefusesAFinishedJob) {
  StartChief();
  JoinAll();
  const std::string endpoint = endpoint_;
  StopChief();
  StartChief(endpoint);
  auto view = WaitView(
      w0_->client.get(), [](const ClusterView& v) { return Name(v.job_state) == "training"; },
      milliseconds(5000));
  ASSERT_EQ(Name(view.job_state), "training") << "every member re-registered";
  const std::string part =
      R"({"name": "dense", "files": [{"path": "d", "size": 1, "crc32c": "f421572c"}]})";
  auto committed = w0_->client->CommitCheckpoint(39, {part}, "cpu-test", milliseconds(3000));
  ASSERT_TRUE(committed.ok()) << committed.status();
  auto latest = LoadLatest(job_.checkpoint.dir, false, nullptr);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 39);
  EXPECT_EQ(latest->term, 2u);
  StopChief();
  StartChief(endpoint);  // killed again: rejoined, although the last step is committed
  EXPECT_EQ(service_->term(), 3u);
  ASSERT_TRUE(service_->CloseRun().ok());
  StopChief();
  members_.clear();
  wire::RpcServer server(&context_, wire::ServerOptions{}, wire::Identity{});
  testing::WriteFile(job_.checkpoint.dir + "/d", "d");  // a job start reads the files back
  auto refused = ChiefService::Create(job_, &server);
  EXPECT_TRUE(refused.status().IsInvalidArgument()) << refused.status();
}

// A commit the chief cannot write (a full disk: here its file-size limit) is answered OVERLOADED,
// which the client returns at once as kResourceExhausted (worker 0 then asks again until there
// is space, rather than spend its budget and fail a final checkpoint). Nothing is committed and
// nothing half-written is left; the same commit succeeds once there is space.
TEST_F(ChiefServiceTest, ACommitOnAFullDiskIsRefusedForNowAndCommittedOnceThereIsSpace) {
  StartChief();
  JoinAll();
  const std::string part =
      R"({"name": "dense", "files": [{"path": "d", "size": 1, "crc32c": "f421572c"}]})";
  {
    testing::FullDisk disk;
    auto refused = w0_->client->CommitCheckpoint(39, {part}, "cpu-test", milliseconds(3000));
    EXPECT_TRUE(refused.status().IsResourceExhausted()) << refused.status();
    EXPECT_NE(refused.status().message().find("EFBIG"), std::string::npos) << refused.status();
  }
  EXPECT_TRUE(LoadLatest(job_.checkpoint.dir, false, nullptr).status().IsNotFound());
  for (const auto& e : std::filesystem::recursive_directory_iterator(job_.checkpoint.dir))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  auto committed = w0_->client->CommitCheckpoint(39, {part}, "cpu-test", milliseconds(3000));
  ASSERT_TRUE(committed.ok()) << committed.status();
  auto latest = LoadLatest(job_.checkpoint.dir, false, nullptr);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 39);
}

// A run left open, and every process starts anew (no survivor re-registers): the chief starts
// the job after all, with its checks: a finished job is refused and the chief must exit.
TEST_F(ChiefServiceTest, OpenRunWithoutSurvivorsIsAJobStartAfterAll) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  const std::string part =
      R"({"name": "dense", "files": [{"path": "d", "size": 1, "crc32c": "f421572c"}]})";
  ASSERT_TRUE(w0_->client->CommitCheckpoint(39, {part}, "cpu-test", milliseconds(3000)).ok());
  testing::WriteFile(job_.checkpoint.dir + "/d", "d");  // a job start reads the files back
  const std::string endpoint = endpoint_;
  StopChief();
  members_.clear();
  StartChief(endpoint);
  EXPECT_TRUE(service_->fatal().ok());
  Member& fresh = NewMember(wire::Role::PS, 0);
  auto reg = fresh.client->Register(-1, milliseconds(3000));
  ASSERT_FALSE(reg.ok());
  EXPECT_TRUE(reg.status().IsInvalidArgument()) << reg.status();
  EXPECT_TRUE(service_->fatal().IsInvalidArgument()) << service_->fatal();
}

// The collectives may be meeting through the store when the chief is killed: a restarted chief
// of the same run still has their keys; a new run starts with none.
TEST_F(ChiefServiceTest, RendezvousKeysSurviveARestartWithinTheRunOnly) {
  StartChief();
  JoinAll();
  const std::string binary("\x00\xff\x10gloo", 7);
  ASSERT_TRUE(w0_->client->KvSet("gen-1/rank0", binary).ok());
  const std::string endpoint = endpoint_;
  StopChief();
  StartChief(endpoint);
  // The client's first request after the restart can be lost with the old connection (as in a
  // collective's rendezvous, which retries until its deadline): retry for a while.
  auto got = w1_->client->KvGet("gen-1/rank0");
  for (int attempt = 0; attempt < 10 && got.status().IsDeadlineExceeded(); ++attempt)
    got = w1_->client->KvGet("gen-1/rank0");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, binary);
  ASSERT_TRUE(service_->CloseRun().ok());
  StopChief();
  members_.clear();
  StartChief(endpoint);
  Member& w = Join(wire::Role::WORKER, 0, false);
  got = w.client->KvGet("gen-1/rank0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
}

// A worker's final report while the chief is being restarted still reaches its successor.
TEST_F(ChiefServiceTest, FinalReportReachesAChiefThatIsRestarting) {
  StartChief();
  JoinAll(/*heartbeats=*/false);
  const std::string endpoint = endpoint_;
  StopChief();
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(600));
    StartChief(endpoint);
  });
  Progress done;
  done.state = MemberState::kDone;
  done.step = 39;
  w0_->client->SetProgress(done);
  Status s = w0_->client->HeartbeatNow(milliseconds(5000));
  later.join();
  ASSERT_TRUE(s.ok()) << s;
  auto view = w0_->client->View(milliseconds(2000));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(Name(Find(*view, "worker", 0)->state), "done");
  EXPECT_EQ(view->term, 2u);
}

}  // namespace
}  // namespace tandem::chief
