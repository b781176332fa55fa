// The node manager's side of the usage profiles: [profile] config, the conversion of a GPU
// reading into a profiler sample, the feeding of the profiler by the Monitor, and what the API,
// /metrics and heartbeats publish. The publishing tests read profiles built by hand through a
// fake ProfileSource, so they check the plumbing, never the profiler's own judgement.
#include "node/profiling.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "gpu/monitor.h"
#include "node/heartbeat.h"
#include "node/metrics.h"
#include "node/server.h"
#include "profile/json.h"

namespace flyt::node {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kGiB = 1ULL << 30;

// ---- [profile] -------------------------------------------------------------------------------

TEST(ProfileConfigTest, DefaultsAndEveryKey) {
  auto d = ParseNodeConfig("", "x.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->profile.enabled);
  EXPECT_EQ(d->profile.allocated_idle_after, milliseconds(300000));
  EXPECT_EQ(d->profile.state_hold, milliseconds(10000));
  EXPECT_EQ(d->profile.cycle_window, milliseconds(600000));
  EXPECT_EQ(d->profile.analysis_interval, milliseconds(5000));
  EXPECT_EQ(d->profile.idle_util_percent, 2);
  EXPECT_EQ(d->profile.min_cycles, 3);
  auto c = ParseNodeConfig(R"([profile]
enabled = false
allocated_idle_after = "20s"
state_hold = 5
cycle_window = "2m"
analysis_interval = "500ms"
idle_util_percent = 1.5
min_cycles = 4
)",
                           "x.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->profile.enabled);
  EXPECT_EQ(c->profile.allocated_idle_after, milliseconds(20000));
  EXPECT_EQ(c->profile.state_hold, milliseconds(5000));
  EXPECT_EQ(c->profile.cycle_window, milliseconds(120000));
  EXPECT_EQ(c->profile.analysis_interval, milliseconds(500));
  EXPECT_EQ(c->profile.idle_util_percent, 1.5);
  EXPECT_EQ(c->profile.min_cycles, 4);
}

TEST(ProfileConfigTest, BadValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"state_hold = \"10 parsecs\"", "profile.state_hold: '10 parsecs' is not a duration"},
      {"state_hold = \"2h\"", "profile.state_hold: 7200000 ms is out of range"},
      {"cycle_window = \"10s\"", "profile.cycle_window: 10000 ms is out of range"},
      {"allocated_idle_after = true", "profile.allocated_idle_after: expected a duration"},
      {"idle_util_percent = 100", "profile.idle_util_percent: value"},
      {"cycle_window = \"2h\"", "profile.cycle_window: 7200000 ms is out of range"},
      {"state_hold = \"20m\"", "profile.state_hold: must not be longer than cycle_window (600 s)"},
      {"min_cycles = 1", "profile.min_cycles: value"},
      {"enabled = \"yes\"", "profile.enabled"},
      {"window = \"1m\"", "profile.window"},
  };
  for (const auto& [line, expected] : cases) {
    auto c = ParseNodeConfig(std::string("[profile]\n") + line + "\n", "x.toml");
    ASSERT_FALSE(c.ok()) << line;
    EXPECT_NE(c.status().message().find(expected), std::string::npos)
        << line << ": " << c.status().message();
    EXPECT_NE(c.status().message().find("x.toml:2"), std::string::npos) << c.status().message();
  }
}

TEST(ProfileConfigTest, OptionsFromTheConfig) {
  ProfileConfig c;
  c.allocated_idle_after = milliseconds(20000);
  c.state_hold = milliseconds(5000);
  c.cycle_window = milliseconds(120000);
  c.analysis_interval = milliseconds(2000);
  c.idle_util_percent = 3;
  c.min_cycles = 4;
  profile::ProfilerOptions o = ProfilerOptionsFrom(c, milliseconds(500));
  EXPECT_EQ(o.sample_interval, milliseconds(500));
  EXPECT_EQ(o.allocated_idle_after, seconds(20));
  EXPECT_EQ(o.state_hold, seconds(5));
  EXPECT_EQ(o.cycle_window, seconds(120));
  EXPECT_EQ(o.analysis_interval, milliseconds(2000));
  EXPECT_EQ(o.idle_util_percent, 3);
  EXPECT_EQ(o.cycle.idle_level, 3);
  EXPECT_EQ(o.cycle.min_cycles, 4);
}

// ---- GpuInfo -> profile::Sample --------------------------------------------------------------

gpu::GpuInfo Busy() {
  gpu::GpuInfo g;
  g.index = 0;
  g.uuid = "GPU-aaaa";
  g.name = "NVIDIA H100 80GB HBM3";
  g.gpu_util_percent = 97;
  g.memory_util_percent = 58;
  g.memory_used_bytes = 70 * kGiB;
  g.memory_total_bytes = 80 * kGiB;
  g.power_draw_mw = 661760;
  gpu::ProcessInfo p;
  p.pid = 4242;
  p.name = "python3";
  p.user = "alice";
  p.used_memory_bytes = 69 * kGiB;
  g.processes.push_back(p);
  g.util_samples = {{1767225600000000ULL, 96}, {1767225600166667ULL, 98}};
  return g;
}

TEST(ToProfileSampleTest, EveryReadingInItsUnit) {
  const auto at = std::chrono::system_clock::time_point(seconds(1767225601));
  profile::Sample s = ToProfileSample(Busy(), at, 1234.5, 256ULL << 20);
  EXPECT_EQ(s.at, at);
  EXPECT_FALSE(s.lost);
  EXPECT_EQ(s.util_percent, 97);
  EXPECT_EQ(s.memory_util_percent, 58);
  EXPECT_EQ(s.memory_used_bytes, 70 * kGiB);
  EXPECT_EQ(s.memory_total_bytes, 80 * kGiB);
  ASSERT_TRUE(s.power_w);
  EXPECT_DOUBLE_EQ(*s.power_w, 661.76);
  EXPECT_EQ(s.launches_per_second, 1234.5);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, 4242u);
  EXPECT_EQ(s.processes[0].name, "python3");
  EXPECT_EQ(s.processes[0].user, "alice");
  EXPECT_EQ(s.processes[0].memory_bytes, 69 * kGiB);
  EXPECT_TRUE(s.processes_known);
  ASSERT_EQ(s.util_samples.size(), 2u);
  EXPECT_EQ(s.util_samples[0].at,
            std::chrono::system_clock::time_point(std::chrono::microseconds(1767225600000000LL)));
  EXPECT_EQ(s.util_samples[1].percent, 98);
}

TEST(ToProfileSampleTest, AbsentStaysAbsentAndLostHasNoReadings) {
  gpu::GpuInfo bare;
  bare.uuid = "GPU-x";
  profile::Sample s = ToProfileSample(bare, {}, std::nullopt, 256ULL << 20);
  EXPECT_FALSE(s.util_percent);
  EXPECT_FALSE(s.memory_used_bytes);
  EXPECT_FALSE(s.power_w);
  EXPECT_FALSE(s.launches_per_second);
  EXPECT_TRUE(s.processes_known);  // nothing in use that a process could hold
  gpu::GpuInfo lost = Busy();
  lost.lost = true;
  profile::Sample l = ToProfileSample(lost, {}, 5.0, 256ULL << 20);
  EXPECT_TRUE(l.lost);
  EXPECT_FALSE(l.util_percent);
  EXPECT_TRUE(l.processes.empty());
  EXPECT_TRUE(l.util_samples.empty());
}

TEST(ToProfileSampleTest, NoProcessListedWhileMemoryIsHeldMeansProcessesUnknown) {
  gpu::GpuInfo g = Busy();
  g.processes.clear();
  EXPECT_FALSE(ToProfileSample(g, {}, std::nullopt, 256ULL << 20).processes_known);
  g.memory_used_bytes = 4ULL << 20;  // the driver's own few MiB
  EXPECT_TRUE(ToProfileSample(g, {}, std::nullopt, 256ULL << 20).processes_known);
}

class FakeTracer final : public trace::StatsSource {
 public:
  trace::TracerHealth Health() const override { return health; }
  std::vector<trace::ProcessCuda> Processes() const override { return processes; }
  trace::TracerHealth health;
  std::vector<trace::ProcessCuda> processes;
};

TEST(LaunchRatesTest, SumOfLiveProcessesPerGpuAbsentWithoutATracer) {
  std::vector<gpu::GpuInfo> gpus(2);
  gpus[0].uuid = "GPU-0";
  gpus[1].uuid = "GPU-1";
  EXPECT_TRUE(LaunchRates(nullptr, gpus).empty());
  FakeTracer tracer;
  tracer.health.enabled = false;
  EXPECT_TRUE(LaunchRates(&tracer, gpus).empty());  // tracing off: unknown, not 0
  tracer.health.enabled = true;
  auto proc = [](std::string uuid, double rate, bool exited) {
    trace::ProcessCuda p;
    p.gpu_uuid = std::move(uuid);
    p.launches_per_second = rate;
    p.exited = exited;
    return p;
  };
  tracer.processes = {proc("GPU-0", 100, false), proc("GPU-0", 50, false),
                      proc("GPU-0", 999, true), proc("GPU-9", 7, false), proc("", 3, false)};
  auto rates = LaunchRates(&tracer, gpus);
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(rates["GPU-0"], 150);
  EXPECT_EQ(rates["GPU-1"], 0);  // traced, nothing launched
}

// ---- Monitor -> Profiling --------------------------------------------------------------------

// GPUs whose count a test changes; each reading as Busy() but its index/uuid.
class Gpus final : public gpu::Backend {
 public:
  gpu::Source source() const override { return gpu::Source::kNvml; }
  Result<gpu::GpuSnapshot> Snapshot() override {
    gpu::GpuSnapshot snap;
    snap.source = gpu::Source::kNvml;
    for (uint32_t i = 0; i < count.load(); ++i) {
      gpu::GpuInfo g = Busy();
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      snap.gpus.push_back(g);
    }
    return snap;
  }
  std::atomic<uint32_t> count{2};
};

TEST(ProfilingTest, EverySampleFeedsTheProfilerAndGpusThatLeaveAreDropped) {
  FakeClock clock;
  auto backend = std::make_unique<Gpus>();
  Gpus* gpus = backend.get();
  gpu::Monitor monitor(std::move(backend), clock);
  auto profiling = Profiling::Create(ProfileConfig{}, milliseconds(1000));
  ASSERT_TRUE(profiling.ok()) << profiling.status().ToString();
  Profiling& p = **profiling;
  monitor.SetSampleObserver([&](const gpu::GpuSnapshot& snap) { p.Observe(snap); });
  EXPECT_TRUE(p.Profiles().empty());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(monitor.SampleOnce().ok());
    clock.Advance(seconds(1));
  }
  auto all = p.Profiles();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].index, 0u);
  EXPECT_EQ(all[0].uuid, "GPU-0");
  EXPECT_EQ(all[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(all[1].uuid, "GPU-1");
  ASSERT_TRUE(p.Profile(1));
  EXPECT_FALSE(p.Profile(7));
  EXPECT_GT(p.BytesPerGpu(), 0u);
  EXPECT_EQ(p.OptionsJson()["state_hold_s"], 10.0);
  gpus->count = 1;
  ASSERT_TRUE(monitor.SampleOnce().ok());
  ASSERT_EQ(p.Profiles().size(), 1u);
  EXPECT_FALSE(p.Profile(1));
}

// ---- what is published -----------------------------------------------------------------------

// Two profiles built by hand: GPU 0 cyclic (12 s), GPU 1 allocated-idle (jupyter-lab of alice).
std::vector<profile::GpuProfile> HandMade() {
  const auto t = std::chrono::system_clock::time_point(seconds(1767225700));
  profile::GpuProfile a;
  a.index = 0;
  a.uuid = "GPU-0";
  a.name = "NVIDIA H100 80GB HBM3";
  a.computed_at = t;
  a.state = profile::State::kCyclic;
  a.state_since = t - seconds(60);
  a.state_seconds = 60;
  profile::Cycle c;
  c.period_s = 12;
  c.confidence = 0.9;
  c.method = "autocorrelation";
  c.cycles_in_window = 8;
  c.phase_origin = t - seconds(96);
  c.util_peak_offset_s = 4;
  c.util_trough_offset_s = 10.5;
  c.next_util_trough_at = t + seconds(3);
  a.cycle = c;
  for (const char* name : {"1m", "15m", "1h"}) {
    profile::Window w;
    w.name = name;
    w.length = seconds(60);
    w.util_percent = profile::Quantiles{90, 97, 98, 60};
    w.memory_used_bytes = profile::Quantiles{60.0 * kGiB, 70.0 * kGiB, 71.0 * kGiB, 60};
    w.power_w = profile::Quantiles{600, 660, 670, 60};
    a.windows.push_back(w);
  }
  a.memory.total_bytes = 80 * kGiB;
  a.memory.peak_used_bytes = 71 * kGiB;
  a.memory.headroom_bytes = 9 * kGiB;
  a.memory.peak_window_s = 36;
  profile::GpuProfile b;
  b.index = 1;
  b.uuid = "GPU-1";
  b.name = "NVIDIA H100 80GB HBM3";
  b.computed_at = t;
  b.state = profile::State::kAllocatedIdle;
  b.state_since = t - seconds(42);
  b.state_seconds = 42;
  profile::ProcessUse nb{4242, "jupyter-lab", "alice", 30 * kGiB};
  b.allocated_idle = profile::AllocatedIdle{342, 30 * kGiB, {nb}};
  b.processes = {nb};
  b.phase_changes.push_back(
      {t - seconds(42), profile::State::kSteady, profile::State::kAllocatedIdle, "state", ""});
  return {a, b};
}

class FakeProfiles final : public ProfileSource {
 public:
  std::vector<profile::GpuProfile> Profiles() const override { return HandMade(); }
  std::optional<profile::GpuProfile> Profile(uint32_t index) const override {
    for (profile::GpuProfile& p : HandMade()) {
      if (p.index == index) return p;
    }
    return std::nullopt;
  }
  std::map<std::string, uint64_t> PhaseChangeCounts() const override {
    return {{"GPU-1", 3}};
  }
  size_t BytesPerGpu() const override { return 123456; }
  json OptionsJson() const override { return {{"enabled", true}}; }
};

TEST(ProfileMetricsTest, StateOnePerStateCycleQuantilesAndCounters) {
  Gpus backend;
  gpu::GpuSnapshot snap = *backend.Snapshot();
  snap.driver_version = "580.65.06";
  std::vector<profile::GpuProfile> profiles = HandMade();
  std::map<std::string, uint64_t> changes = {{"GPU-1", 3}};
  MetricsInput in;
  in.snapshot = &snap;
  in.hostname = "node-a";
  in.node_name = "node-a";
  in.profiles = &profiles;
  in.phase_changes = &changes;
  const std::string out = RenderMetrics(in);
  const std::string l0 =
      R"(gpu="0",UUID="GPU-0",pci_bus_id="",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",)"
      R"(Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.65.06")";
  const std::string l1 =
      R"(gpu="1",UUID="GPU-1",pci_bus_id="",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",)"
      R"(Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.65.06")";
  for (const char* family :
       {"flyt_gpu_state", "flyt_gpu_state_seconds", "flyt_gpu_cycle_period_seconds",
        "flyt_gpu_cycle_confidence", "flyt_gpu_util_quantile",
        "flyt_gpu_memory_used_quantile_bytes", "flyt_gpu_power_quantile_watts",
        "flyt_gpu_allocated_idle_seconds", "flyt_gpu_memory_headroom_bytes"}) {
    EXPECT_NE(out.find(std::string("# TYPE ") + family + " gauge\n"), std::string::npos) << family;
  }
  EXPECT_NE(out.find("# TYPE flyt_profile_phase_changes_total counter\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_state{" + l0 + R"(,state="cyclic"} 1)" + "\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("flyt_gpu_state{" + l0 + R"(,state="idle"} 0)" + "\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_state{" + l1 + R"(,state="allocated-idle"} 1)" + "\n"),
            std::string::npos);
  size_t states = 0;
  for (size_t pos = 0; (pos = out.find("\nflyt_gpu_state{", pos)) != std::string::npos; ++pos) {
    ++states;
  }
  EXPECT_EQ(states, 2 * profile::AllStates().size());
  EXPECT_NE(out.find("flyt_gpu_state_seconds{" + l1 + "} 42\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_cycle_period_seconds{" + l0 + "} 12\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_cycle_confidence{" + l0 + "} 0.9\n"), std::string::npos);
  EXPECT_EQ(out.find("flyt_gpu_cycle_period_seconds{" + l1), std::string::npos);  // not cyclic
  EXPECT_NE(out.find("flyt_gpu_util_quantile{" + l0 + R"(,window="15m",quantile="0.95"} 97)"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_memory_used_quantile_bytes{" + l0 +
                     R"(,window="1h",quantile="0.5"} 64424509440)"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_power_quantile_watts{" + l0 + R"(,window="1m",quantile="0.99"} 670)"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_allocated_idle_seconds{" + l0 + "} 0\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_allocated_idle_seconds{" + l1 + "} 342\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_memory_headroom_bytes{" + l0 + "} 9663676416\n"),
            std::string::npos);
  EXPECT_NE(out.find(R"(flyt_profile_phase_changes_total{gpu="0",UUID="GPU-0"} 0)"),
            std::string::npos);
  EXPECT_NE(out.find(R"(flyt_profile_phase_changes_total{gpu="1",UUID="GPU-1"} 3)"),
            std::string::npos);

  in.profiles = nullptr;  // [profile] off: no profile families at all
  EXPECT_EQ(RenderMetrics(in).find("flyt_gpu_state"), std::string::npos);
}

class ProfileServerTest : public ::testing::Test {
 protected:
  void Start(const ProfileSource* profiles) {
    ASSERT_TRUE(monitor_.SampleOnce().ok());
    NodeConfig config;
    config.listen_port = 0;
    server_ = std::make_unique<NodeServer>(monitor_, config, clock_, "test", nullptr, nullptr,
                                           profiles);
    ASSERT_TRUE(server_->Start().ok());
  }
  std::pair<int, json> Get(const std::string& path) {
    httplib::Client client("127.0.0.1", server_->port());
    auto res = client.Get(path.c_str());
    if (!res) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }

  FakeClock clock_;
  gpu::Monitor monitor_{std::make_unique<Gpus>(), clock_};
  FakeProfiles fake_;
  std::unique_ptr<NodeServer> server_;
};

TEST_F(ProfileServerTest, ProfilesAndOneGpusProfile) {
  Start(&fake_);
  auto [status, all] = Get("/api/v1/profiles");
  ASSERT_EQ(status, 200) << all.dump();
  ASSERT_EQ(all["profiles"].size(), 2u);
  EXPECT_EQ(all["profiles"][0], profile::ToJson(HandMade()[0]));
  EXPECT_EQ(all["footprint_bytes_per_gpu"], 123456);
  EXPECT_EQ(all["options"]["enabled"], true);

  auto [s1, one] = Get("/api/v1/gpus/1/profile");
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(one["state"], "allocated-idle");
  EXPECT_EQ(one["allocated_idle"]["processes"][0]["name"], "jupyter-lab");
  EXPECT_EQ(one["allocated_idle"]["processes"][0]["user"], "alice");
  EXPECT_EQ(one["phase_changes"].size(), 1u);

  auto [s404, missing] = Get("/api/v1/gpus/7/profile");
  EXPECT_EQ(s404, 404);
  EXPECT_EQ(missing["code"], "not_found");
  auto [s400, bad] = Get("/api/v1/gpus/x/profile");
  EXPECT_EQ(s400, 400);
  EXPECT_EQ(bad["code"], "invalid_argument");
}

TEST_F(ProfileServerTest, EachGpuCarriesItsSummary) {
  Start(&fake_);
  auto [status, list] = Get("/api/v1/gpus");
  ASSERT_EQ(status, 200);
  ASSERT_EQ(list["gpus"].size(), 2u);
  EXPECT_EQ(list["gpus"][0]["profile"], profile::SummaryJson(HandMade()[0]));
  EXPECT_EQ(list["gpus"][0]["profile"]["period_s"], 12.0);
  EXPECT_EQ(list["gpus"][1]["profile"]["state"], "allocated-idle");
  auto [s1, one] = Get("/api/v1/gpus/0");
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(one["profile"]["state"], "cyclic");
  auto [sm, metrics] = Get("/metrics");
  (void)metrics;
  EXPECT_EQ(sm, 200);
}

TEST_F(ProfileServerTest, ProfilesOffIs503AndNullSummaries) {
  Start(nullptr);
  for (const char* path : {"/api/v1/profiles", "/api/v1/gpus/0/profile"}) {
    auto [status, reply] = Get(path);
    EXPECT_EQ(status, 503) << path;
    EXPECT_EQ(reply["code"], "unavailable") << path;
    EXPECT_EQ(reply["error"], "profiles are off ([profile] enabled = false)") << path;
  }
  auto [status, list] = Get("/api/v1/gpus");
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(list["gpus"][0].contains("profile"));
  EXPECT_TRUE(list["gpus"][0]["profile"].is_null());
  auto [s1, one] = Get("/api/v1/gpus/0");
  EXPECT_TRUE(one["profile"].is_null());
}

// A cluster manager that keeps the heartbeats it receives.
class FakeManager {
 public:
  // `refuse_profiles`: answers a heartbeat with "profiles" as a manager older than them does.
  explicit FakeManager(bool refuse_profiles = false) {
    server_.Post("/api/v1/nodes/heartbeat", [this, refuse_profiles](const httplib::Request& req,
                                                                    httplib::Response& res) {
      MutexLock lock(mu_);
      json body = json::parse(req.body, nullptr, false);
      ++requests_;
      if (refuse_profiles && body.contains("profiles")) {
        res.status = 400;
        res.set_content(R"x({"error": "unknown field 'profiles' (expected name, api_url)",)x"
                        R"x( "code": "invalid_argument"})x",
                        "application/json");
        return;
      }
      bodies_.push_back(std::move(body));
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeManager() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() {
    MutexLock lock(mu_);
    return requests_;
  }
  // The first heartbeat, waiting up to 10 s for it.
  json First() {
    for (int i = 0; i < 200; ++i) {
      {
        MutexLock lock(mu_);
        if (!bodies_.empty()) return bodies_.front();
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    return json();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  Mutex mu_;
  std::vector<json> bodies_ FLYT_GUARDED_BY(mu_);
  int requests_ FLYT_GUARDED_BY(mu_) = 0;
};

TEST(ProfileHeartbeatTest, CarriesEveryProfileOnlyWhenOn) {
  FakeClock clock;
  gpu::Monitor monitor(std::make_unique<Gpus>(), clock);
  ASSERT_TRUE(monitor.SampleOnce().ok());
  FakeProfiles fake;
  for (const ProfileSource* profiles : {static_cast<const ProfileSource*>(&fake),
                                        static_cast<const ProfileSource*>(nullptr)}) {
    FakeManager manager;
    NodeConfig config;
    config.name = "node-a";
    config.cluster_manager = manager.url();
    HeartbeatSender sender(monitor, config, "http://127.0.0.1:1", "test", nullptr, nullptr,
                           profiles);
    sender.Start();
    json body = manager.First();
    sender.Stop();
    ASSERT_TRUE(body.is_object()) << "no heartbeat arrived";
    if (profiles == nullptr) {
      EXPECT_FALSE(body.contains("profiles"));
      continue;
    }
    ASSERT_TRUE(body["profiles"].is_array());
    ASSERT_EQ(body["profiles"].size(), 2u);
    EXPECT_EQ(body["profiles"][1], profile::ToJson(HandMade()[1]));
    // What the cluster manager will parse it with.
    auto back = profile::ProfileFromJson(body["profiles"][0]);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->state, profile::State::kCyclic);
  }
}

TEST(ProfileHeartbeatTest, AManagerOlderThanProfilesStillGetsTheHeartbeat) {
  FakeClock clock;
  gpu::Monitor monitor(std::make_unique<Gpus>(), clock);
  ASSERT_TRUE(monitor.SampleOnce().ok());
  FakeProfiles fake;
  FakeManager manager(/*refuse_profiles=*/true);
  NodeConfig config;
  config.name = "node-a";
  config.cluster_manager = manager.url();
  HeartbeatSender sender(monitor, config, "http://127.0.0.1:1", "test", nullptr, nullptr, &fake);
  sender.Start();
  json body = manager.First();
  sender.Stop();
  ASSERT_TRUE(body.is_object()) << "no heartbeat got through";
  EXPECT_FALSE(body.contains("profiles"));
  EXPECT_EQ(body["name"], "node-a");
  EXPECT_EQ(manager.requests(), 2);  // refused with profiles, then taken without
}

TEST(ProfileHeartbeatTest, BoundedNumberOfProfiles) {
  std::vector<profile::GpuProfile> many(kMaxProfilesPerHeartbeat + 5, HandMade()[0]);
  EXPECT_EQ(ProfilesHeartbeatJson(many).size(), kMaxProfilesPerHeartbeat);
}

}  // namespace
}  // namespace flyt::node
