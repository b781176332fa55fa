// The real NVML binding (src/gpu/nvml_backend.cc, src/nvml/library.cc) against flyt's simulated
// NVML library, loaded with dlopen exactly as libnvidia-ml.so.1 would be. Scenario time is set
// through FLYT_SIM_CLOCK_FILE, so nothing here sleeps to make time pass. Every expected value is
// computed from what the scenario file says (see sim/scenarios/).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "nvml/library.h"

namespace flyt::gpu {
namespace {

constexpr uint64_t kMiB = 1024ULL * 1024;

std::string SimLibrary(bool legacy = false) {
  return std::string(FLYT_BINARY_DIR) + "/lib/libflyt-sim-nvml" + (legacy ? "-legacy" : "") + ".so";
}
std::string Scenario(const std::string& name) {
  return std::string(FLYT_SOURCE_DIR) + "/sim/scenarios/" + name + ".toml";
}

class NvmlSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-nvml-sim-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    clock_file_ = (dir_ / "clock").string();
    SetTime(0);
    setenv("FLYT_SIM_CLOCK_FILE", clock_file_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("FLYT_SIM_CLOCK_FILE");
    unsetenv("FLYT_SIM_SCENARIO");
    std::filesystem::remove_all(dir_);
  }
  void SetTime(double t) { std::ofstream(clock_file_, std::ios::trunc) << t << "\n"; }

  std::unique_ptr<Backend> Open(const std::string& scenario, bool legacy = false) {
    setenv("FLYT_SIM_SCENARIO", scenario.c_str(), 1);
    auto backend = OpenNvmlBackend({SimLibrary(legacy), "/proc"});
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? std::move(backend).value() : nullptr;
  }

  std::filesystem::path dir_;
  std::string clock_file_;
};

TEST_F(NvmlSimTest, H100TrainingNodeReadsWhatTheScenarioSays) {
  SetTime(10);  // compute phase: utilisation 97
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  auto snap = backend->Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ(snap->source, Source::kNvml);
  EXPECT_EQ(snap->driver_version, "580.65.06");
  EXPECT_EQ(snap->cuda_driver_version, "13.0");
  EXPECT_EQ(snap->simulated_scenario, Scenario("h100x8-training"));
  EXPECT_TRUE(snap->reason.empty()) << snap->reason;
  ASSERT_EQ(snap->gpus.size(), 8u);
  for (const GpuInfo& g : snap->gpus) {
    SCOPED_TRACE("GPU " + std::to_string(g.index));
    EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
    EXPECT_FALSE(g.lost);
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u);
    EXPECT_EQ(g.gpu_util_percent, 97u);
    EXPECT_EQ(g.memory_util_percent, 61u);
    EXPECT_EQ(g.memory_total_bytes, 81559 * kMiB);
    EXPECT_EQ(g.memory_reserved_bytes, 529 * kMiB);  // v2 structure
    EXPECT_EQ(g.memory_used_bytes, (73216 + 4) * kMiB);
    EXPECT_EQ(g.memory_free_bytes, (81559 - 529 - 73216 - 4) * kMiB);
    EXPECT_EQ(g.temperature_c, 67u);      // 31 + (68 − 31)·0.97 = 66.9
    EXPECT_EQ(g.power_draw_mw, 661760u);  // 72 W + (680 − 72) W·0.97
    EXPECT_EQ(g.power_limit_mw, 700000u);
    EXPECT_EQ(g.energy_mj, 10ULL * 661760);  // 10 s at constant power
    EXPECT_EQ(g.sm_clock_mhz, 1980u);
    EXPECT_EQ(g.max_sm_clock_mhz, 1980u);
    EXPECT_EQ(g.cores, 16896u);  // nvmlDeviceGetNumGpuCores
    EXPECT_EQ(g.memory_clock_mhz, 2619u);
    EXPECT_EQ(g.pcie_rx_kb_per_s, 97u * 2400);
    EXPECT_EQ(g.performance_state, 0u);
    EXPECT_EQ(g.compute_mode, "default");
    EXPECT_EQ(g.mig_enabled, false);
    EXPECT_EQ(g.ecc.volatile_uncorrected, 0u);
    EXPECT_FALSE(g.fan_speed_percent);  // passively cooled: absent, never 0
    ASSERT_EQ(g.processes.size(), 1u);
    const ProcessInfo& p = g.processes[0];
    EXPECT_EQ(p.pid, 41000 + g.index);
    EXPECT_EQ(p.type, ProcessType::kCompute);
    EXPECT_EQ(p.used_memory_bytes, 73216 * kMiB);
    EXPECT_EQ(p.sm_util_percent, 97u);      // the only process: all of the GPU's load
    EXPECT_EQ(p.memory_util_percent, 58u);  // 60% of 97
    EXPECT_FALSE(p.gpu_instance_id);        // MIG off: 0xFFFFFFFF means none
  }
  EXPECT_EQ(snap->gpus[0].pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(snap->gpus[7].pci_bus_id, "00000000:DB:00.0");
  EXPECT_EQ(snap->gpus[0].pci_device_id, 0x233010DEu);
}

TEST_F(NvmlSimTest, BindingPrefersTheNewestEntryPoints) {
  auto lib = nvml::Library::Load(SimLibrary());
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ((*lib)->BoundSymbol("Init"), "nvmlInit_v2");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetCount"), "nvmlDeviceGetCount_v2");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetPciInfo"), "nvmlDeviceGetPciInfo_v3");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetComputeRunningProcesses"),
            "nvmlDeviceGetComputeRunningProcesses_v3");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetClocksEventReasons"),
            "nvmlDeviceGetCurrentClocksEventReasons");
  EXPECT_EQ((*lib)->BoundSymbol("EventSetWait"), "nvmlEventSetWait_v2");
}

TEST_F(NvmlSimTest, OldDriverFallsBackToUnversionedEntryPoints) {
  auto lib = nvml::Library::Load(SimLibrary(/*legacy=*/true));
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ((*lib)->BoundSymbol("Init"), "nvmlInit");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetCount"), "nvmlDeviceGetCount");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetMemoryInfoV2"), "");  // absent
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetComputeRunningProcesses"), "");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetComputeRunningProcessesV1"),
            "nvmlDeviceGetComputeRunningProcesses");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetClocksEventReasons"),
            "nvmlDeviceGetCurrentClocksThrottleReasons");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetPciInfo"), "nvmlDeviceGetPciInfo_v2");
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetNumGpuCores"), "");  // an old driver has no core count

  SetTime(10);
  auto backend = Open(Scenario("h100x8-training"), /*legacy=*/true);
  ASSERT_TRUE(backend);
  auto snap = backend->Snapshot();
  ASSERT_TRUE(snap.ok());
  const GpuInfo& g = snap->gpus[3];
  EXPECT_EQ(g.pci_bus_id, "00000000:5D:00.0");  // through nvmlDeviceGetPciInfo_v2
  EXPECT_FALSE(g.cores);                         // unknown, not 0
  // The v1 memory structure has no `reserved`; NVML counts it as used there.
  EXPECT_FALSE(g.memory_reserved_bytes);
  EXPECT_EQ(g.memory_used_bytes, (73216 + 4 + 529) * kMiB);
  ASSERT_EQ(g.processes.size(), 1u);  // read through the v1 process structure
  EXPECT_EQ(g.processes[0].pid, 41003u);
  EXPECT_EQ(g.processes[0].used_memory_bytes, 73216 * kMiB);
}

TEST_F(NvmlSimTest, SameTimeSameReadingsAndTimeMovesTheLoad) {
  SetTime(80);  // all-reduce phase: utilisation 12
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  auto a = backend->Snapshot();
  auto b = backend->Snapshot();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->gpus[2].gpu_util_percent, 12u);
  EXPECT_EQ(a->gpus[2].power_draw_mw, b->gpus[2].power_draw_mw);
  EXPECT_EQ(a->gpus[2].energy_mj, b->gpus[2].energy_mj);
  EXPECT_EQ(a->gpus[2].temperature_c, b->gpus[2].temperature_c);

  SetTime(90);  // next period: back to compute
  auto c = backend->Snapshot();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->gpus[2].gpu_util_percent, 97u);
  // Energy is a counter: 72 s at 661.76 W + 18 s at 144.96 W.
  EXPECT_EQ(c->gpus[2].energy_mj, 72ULL * 661760 + 18ULL * 144960);
  EXPECT_GT(*c->gpus[2].energy_mj, *a->gpus[2].energy_mj);
}

TEST_F(NvmlSimTest, ProcessesComeAndGoAndShareTheLoad) {
  auto backend = Open(Scenario("mixed-inference"));
  ASSERT_TRUE(backend);
  SetTime(30);
  auto early = backend->Snapshot();
  ASSERT_TRUE(early.ok());
  ASSERT_EQ(early->gpus.size(), 3u);
  EXPECT_EQ(early->gpus[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(early->gpus[1].uuid, "GPU-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d");
  EXPECT_EQ(early->gpus[2].processes.size(), 1u);  // transcoder not started yet
  EXPECT_EQ(early->gpus[2].gpu_util_percent, 5u);  // step load: 5% before t=60

  SetTime(100);
  auto mid = backend->Snapshot();
  ASSERT_TRUE(mid.ok());
  const GpuInfo& t4 = mid->gpus[2];
  EXPECT_EQ(t4.gpu_util_percent, 45u);
  ASSERT_EQ(t4.processes.size(), 2u);
  bool saw_graphics = false;
  for (const ProcessInfo& p : t4.processes) {
    if (p.pid == 52390) {
      saw_graphics = true;
      EXPECT_EQ(p.type, ProcessType::kGraphics);
      EXPECT_EQ(p.used_memory_bytes, 2048 * kMiB);
    }
  }
  EXPECT_TRUE(saw_graphics);
  EXPECT_EQ(t4.memory_used_bytes, (3 + 2048 + 3072) * kMiB);
  EXPECT_EQ(t4.encoder_util_percent, 62u);  // NVENC busy while the transcoder runs
  EXPECT_EQ(t4.decoder_util_percent, 38u);
  EXPECT_EQ(t4.pcie_replay_count, 0u);
  EXPECT_FALSE(t4.memory_temperature_c);  // GDDR6: NOT_SUPPORTED in the field's own code
  EXPECT_TRUE(mid->gpus[0].memory_temperature_c);
  EXPECT_EQ(mid->gpus[0].encoder_util_percent, 0u);

  // V100: two servers replayed from the CSV; their shares add up to about the GPU's load.
  const GpuInfo& v100 = mid->gpus[1];
  ASSERT_EQ(v100.processes.size(), 2u);
  uint32_t sum = *v100.processes[0].sm_util_percent + *v100.processes[1].sm_util_percent;
  EXPECT_NEAR(static_cast<double>(sum), static_cast<double>(*v100.gpu_util_percent), 2.0);

  SetTime(250);
  auto late = backend->Snapshot();
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->gpus[2].processes.size(), 1u);  // transcoder stopped at 240 s
}

TEST_F(NvmlSimTest, ProcessUtilisationWithoutNewSamplesIsIdleNotStale) {
  SetTime(10);
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  auto first = backend->Snapshot();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->gpus[0].processes[0].sm_util_percent, 97u);
  // Same instant again: the driver has no sample newer than the last one read (NOT_FOUND),
  // which NVML documents as "no utilisation since": the process is reported idle.
  auto again = backend->Snapshot();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->gpus[0].processes[0].sm_util_percent, 0u);
  SetTime(11);
  auto next = backend->Snapshot();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->gpus[0].processes[0].sm_util_percent, 97u);
}

TEST_F(NvmlSimTest, FaultyNodeUnsupportedFlakyAndLostGpus) {
  SetTime(0);
  auto backend = Open(Scenario("faulty-node"));
  ASSERT_TRUE(backend);
  auto start = backend->Snapshot();
  ASSERT_TRUE(start.ok());
  ASSERT_EQ(start->gpus.size(), 5u);
  // GPU 4 cannot report power draw: absent from the start, the limit still there.
  EXPECT_FALSE(start->gpus[4].power_draw_mw);
  EXPECT_EQ(start->gpus[4].power_limit_mw, 400000u);
  EXPECT_EQ(start->gpus[4].gpu_util_percent, 40u);
  EXPECT_TRUE(start->reason.empty()) << start->reason;

  SetTime(65);  // GPU 3's temperature times out
  auto flaky = backend->Snapshot();
  ASSERT_TRUE(flaky.ok());
  EXPECT_FALSE(flaky->gpus[3].temperature_c);
  EXPECT_TRUE(flaky->gpus[3].gpu_util_percent);  // the rest of GPU 3 stands
  EXPECT_TRUE(flaky->gpus[2].temperature_c);
  EXPECT_NE(flaky->reason.find("NVML_ERROR_TIMEOUT"), std::string::npos) << flaky->reason;

  SetTime(95);  // the sensor is back
  auto back = backend->Snapshot();
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->gpus[3].temperature_c);

  SetTime(121);  // GPU 1 fell off the bus at 120 s
  auto after = backend->Snapshot();
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->gpus.size(), 5u);
  EXPECT_TRUE(after->gpus[1].lost);
  EXPECT_FALSE(after->gpus[1].gpu_util_percent);
  EXPECT_EQ(after->gpus[1].uuid, start->gpus[1].uuid);  // still identified
  for (uint32_t i : {0u, 2u, 3u, 4u}) {
    EXPECT_FALSE(after->gpus[i].lost) << i;
    EXPECT_TRUE(after->gpus[i].gpu_util_percent) << i;
    EXPECT_EQ(after->gpus[i].processes.size(), 1u) << i;
  }
  // Re-initialising NVML does not bring it back (it is still lost), and keeps the others.
  ASSERT_TRUE(backend->Reinitialize().ok());
  auto reinit = backend->Snapshot();
  ASSERT_TRUE(reinit.ok());
  EXPECT_TRUE(reinit->gpus[1].lost);
  EXPECT_EQ(reinit->gpus[1].uuid, start->gpus[1].uuid);
  EXPECT_FALSE(reinit->gpus[0].lost);
  EXPECT_EQ(reinit->gpus[0].uuid, start->gpus[0].uuid);
}

TEST_F(NvmlSimTest, XidEventsAreCountedPerGpu) {
  SetTime(0);
  auto backend = Open(Scenario("faulty-node"));
  ASSERT_TRUE(backend);
  FakeClock clock;
  Monitor monitor(std::move(backend), clock);
  EXPECT_EQ(monitor.PollEvents(std::chrono::milliseconds(0)), 0u);
  SetTime(35);
  EXPECT_EQ(monitor.PollEvents(std::chrono::milliseconds(0)), 1u);
  SetTime(125);
  EXPECT_EQ(monitor.PollEvents(std::chrono::milliseconds(0)), 1u);
  ASSERT_TRUE(monitor.SampleOnce().ok());  // sees GPU 1 lost
  SetTime(205);
  EXPECT_EQ(monitor.PollEvents(std::chrono::milliseconds(0)), 1u);
  EXPECT_EQ(monitor.PollEvents(std::chrono::milliseconds(0)), 0u);  // each delivered once

  auto counts = monitor.EventCountsByGpu();
  EXPECT_EQ(counts[0].by_xid[13], 1u);
  EXPECT_EQ(counts[0].last_xid, 13u);
  EXPECT_EQ(counts[1].by_xid[79], 1u);
  EXPECT_EQ(counts[3].double_bit_ecc, 1u);
  auto events = monitor.RecentEvents();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, EventType::kXid);
  EXPECT_EQ(events[0].xid, 13u);
  EXPECT_EQ(events[1].xid, 79u);
  EXPECT_EQ(events[1].gpu_index, 1u);
  EXPECT_EQ(events[2].type, EventType::kGpuLost);
  EXPECT_EQ(events[2].gpu_index, 1u);
  EXPECT_EQ(events[3].type, EventType::kDoubleBitEcc);

  auto snap = monitor.QueryGpus(false);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->gpus[3].ecc.volatile_uncorrected, 1u);  // the XID 48 counted as ECC
}

TEST_F(NvmlSimTest, MonitoringSessionOverAScriptedTrainingLoad) {
  SetTime(0);
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  FakeClock clock;
  Monitor monitor(std::move(backend), clock);
  auto all = monitor.StartSession();
  auto two = monitor.StartSession({std::vector<uint32_t>{0, 5}, std::nullopt});
  ASSERT_TRUE(all.ok() && two.ok());
  // One sample a second for one full period of the load: 72 s at 97%, 18 s at 12%.
  for (int t = 0; t < 90; ++t) {
    SetTime(t);
    ASSERT_TRUE(monitor.SampleOnce().ok());
    clock.Advance(std::chrono::seconds(1));
  }
  auto running = monitor.GetSession(*all);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->sample_count, 90u);

  auto stats = monitor.StopSession(*all);
  ASSERT_TRUE(stats.ok());
  EXPECT_DOUBLE_EQ(stats->monitoring_duration_seconds, 90.0);
  ASSERT_EQ(stats->gpu_stats.size(), 8u);
  const GpuSessionStats& g = stats->gpu_stats.at(6);
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(g.utilization);
  EXPECT_DOUBLE_EQ(g.utilization->min, 12);
  EXPECT_DOUBLE_EQ(g.utilization->max, 97);
  EXPECT_DOUBLE_EQ(g.utilization->mean, (72 * 97.0 + 18 * 12.0) / 90);
  EXPECT_EQ(g.utilization->samples, 90u);
  EXPECT_DOUBLE_EQ(g.utilization->p50, 97);
  ASSERT_TRUE(g.memory_used_mb);
  EXPECT_DOUBLE_EQ(g.memory_used_mb->min, 4);  // before the rank started at 5 s
  EXPECT_DOUBLE_EQ(g.memory_used_mb->max, 73220);
  EXPECT_DOUBLE_EQ(g.memory_used_mb->mean, (5 * 4.0 + 85 * 73220.0) / 90);
  ASSERT_TRUE(g.power_draw_w);
  EXPECT_DOUBLE_EQ(g.power_draw_w->max, 661.76);
  EXPECT_DOUBLE_EQ(g.power_draw_w->min, 144.96);
  ASSERT_TRUE(g.temperature_c);
  EXPECT_DOUBLE_EQ(g.temperature_c->min, 35);  // 31 + 37·0.12 = 35.4
  EXPECT_DOUBLE_EQ(g.temperature_c->max, 67);
  ASSERT_TRUE(g.memory_usage_percent);
  EXPECT_NEAR(g.memory_usage_percent->max, 100.0 * 73220 / 81559, 1e-9);

  auto subset = monitor.StopSession(*two);
  ASSERT_TRUE(subset.ok());
  ASSERT_EQ(subset->gpu_stats.size(), 2u);
  EXPECT_TRUE(subset->gpu_stats.count(5));
  EXPECT_FALSE(monitor.StopSession(*two).ok());  // already stopped: NOT_FOUND

  // History kept every sample, and downsamples on request.
  auto history =
      monitor.GetHistory(6, clock.WallNow() - std::chrono::hours(1), std::chrono::seconds(0));
  EXPECT_EQ(history.size(), 90u);
  auto by_30s =
      monitor.GetHistory(6, clock.WallNow() - std::chrono::hours(1), std::chrono::seconds(30));
  ASSERT_EQ(by_30s.size(), 3u);
  EXPECT_FLOAT_EQ(by_30s[0].gpu_util_percent, 97);
  EXPECT_FLOAT_EQ(by_30s[2].gpu_util_percent, (12 * 97.0f + 18 * 12.0f) / 30);
}

TEST_F(NvmlSimTest, CacheAndAvailability) {
  SetTime(0);
  auto backend = Open(Scenario("mixed-inference"));
  ASSERT_TRUE(backend);
  FakeClock clock;
  MonitorOptions options;
  options.cache_ttl = std::chrono::seconds(5);
  Monitor monitor(std::move(backend), clock, options);
  auto first = monitor.QueryGpus();
  ASSERT_TRUE(first.ok());
  SetTime(100);
  auto cached = monitor.QueryGpus();  // within the TTL: the same snapshot
  EXPECT_EQ(cached->gpus[2].gpu_util_percent, first->gpus[2].gpu_util_percent);
  auto fresh = monitor.QueryGpus(/*use_cache=*/false);
  EXPECT_EQ(fresh->gpus[2].gpu_util_percent, 45u);
  SetTime(30);
  clock.Advance(std::chrono::seconds(6));  // TTL passed: re-read
  EXPECT_EQ(monitor.QueryGpus()->gpus[2].gpu_util_percent, 5u);

  auto info = monitor.GetGpuInfo(1);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->name, "Tesla V100-SXM2-16GB");
  EXPECT_EQ(monitor.GetGpuInfo(9).status().code(), StatusCode::kNotFound);

  // At 30 s free memory is A100 4043 MiB (66% busy), V100 2812 MiB, T4 12028 MiB (5% busy).
  auto ranked = monitor.GetAvailableGpus(3000 * kMiB, 100);
  ASSERT_TRUE(ranked.ok());
  ASSERT_EQ(ranked->size(), 2u);          // the V100 has less than 3000 MiB free
  EXPECT_EQ((*ranked)[0].gpu.index, 2u);  // T4: 0.6·12028/15360 + 0.4·0.95
  EXPECT_NEAR((*ranked)[0].score, 0.6 * 12028 / 15360 + 0.4 * 0.95, 1e-9);
  EXPECT_EQ((*ranked)[1].gpu.index, 0u);
  EXPECT_NEAR((*ranked)[1].score, 0.6 * 4043 / 40960 + 0.4 * 0.34, 1e-9);
  auto idle_only = monitor.GetAvailableGpus(3000 * kMiB, 50);
  ASSERT_EQ(idle_only->size(), 1u);  // the A100 is too busy
  EXPECT_EQ((*idle_only)[0].gpu.index, 2u);
}

TEST_F(NvmlSimTest, DriverWhoseV3WritesLargerRecordsFallsBackToV2) {
  // Like some early R535 drivers: nvmlDeviceGetComputeRunningProcesses_v3 writes 32-byte records.
  std::string path = (dir_ / "r535.toml").string();
  std::ofstream(path) << "[scenario]\nname = \"r535\"\nquirks = [\"process_info_v3_stride_32\"]\n"
                         "[[gpu]]\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_total_mib = 81559\n"
                         "power_limit_w = 700\nmax_sm_clock_mhz = 1980\nmax_mem_clock_mhz = 2619\n"
                         "utilization = 50\n"
                         "[[process]]\ngpu = 0\npid = 5001\nmemory_mib = 1000\n"
                         "[[process]]\ngpu = 0\npid = 5002\nmemory_mib = 2000\n"
                         "[[process]]\ngpu = 0\npid = 5003\nmemory_mib = 3000\n";
  auto backend = Open(path);
  ASSERT_TRUE(backend);
  for (int sample = 0; sample < 2; ++sample) {
    auto snap = backend->Snapshot();
    ASSERT_TRUE(snap.ok());
    const auto& procs = snap->gpus[0].processes;
    ASSERT_EQ(procs.size(), 3u) << "sample " << sample;
    EXPECT_EQ(procs[0].pid, 5001u);
    EXPECT_EQ(procs[1].pid, 5002u);
    EXPECT_EQ(procs[1].used_memory_bytes, 2000 * kMiB);
    EXPECT_EQ(procs[2].pid, 5003u);
    EXPECT_EQ(procs[2].used_memory_bytes, 3000 * kMiB);
  }
}

TEST_F(NvmlSimTest, EnergyAtAHugeTimeIsExactAndQuick) {
  SetTime(1e9);  // 31 years in: energy comes from whole periods, not a second-by-second walk
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  auto snap = backend->Snapshot();
  ASSERT_TRUE(snap.ok());
  // Square load, period 90 s: 72 s at 661.76 W and 18 s at 144.96 W per period.
  const uint64_t per_period = 72ULL * 661760 + 18ULL * 144960;
  const uint64_t periods = static_cast<uint64_t>(1e9) / 90;
  const uint64_t tail_s = static_cast<uint64_t>(1e9) - periods * 90;  // 10 s, all at the high level
  EXPECT_EQ(snap->gpus[0].energy_mj, periods * per_period + tail_s * 661760);
  SetTime(1e30);  // beyond what the simulator accepts: clamped, still a reading
  auto far = backend->Snapshot();
  ASSERT_TRUE(far.ok());
  EXPECT_TRUE(far->gpus[0].energy_mj);
}

TEST_F(NvmlSimTest, ClientQueriesDoNotSkewSessions) {
  SetTime(10);
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  FakeClock clock;
  Monitor monitor(std::move(backend), clock);
  auto id = monitor.StartSession();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(monitor.SampleOnce().ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(monitor.QueryGpus(/*use_cache=*/false).ok());
  ASSERT_TRUE(monitor.SampleOnce().ok());
  auto stats = monitor.StopSession(*id);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sample_count, 2u);
  EXPECT_EQ(stats->gpu_stats.at(0).utilization->samples, 2u);
  EXPECT_EQ(monitor.GetHistory(0, clock.WallNow() - std::chrono::hours(1), {}).size(), 2u);
}

// nvmlDeviceGetSamples: the driver's 6 Hz utilisation samples, the ones since the last read.
TEST_F(NvmlSimTest, DriverUtilisationSamplesAt6HzSinceTheLastRead) {
  SetTime(10);  // compute phase: 97%
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  auto lib = nvml::Library::Load(SimLibrary());
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ((*lib)->BoundSymbol("DeviceGetSamples"), "nvmlDeviceGetSamples");
  auto first = backend->Snapshot();
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->reason.empty()) << first->reason;
  // The first read gets the driver's buffer: every sample from t = 0 to 10 s, at k/6 s.
  const std::vector<UtilSample>& s = first->gpus[0].util_samples;
  ASSERT_EQ(s.size(), 61u);
  const uint64_t epoch_us = 1767225600ULL * 1000000;
  EXPECT_EQ(s.front().timestamp_us, epoch_us);
  EXPECT_EQ(s.back().timestamp_us, epoch_us + 10000000);
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].percent, 97u);
    if (i > 0) {
      EXPECT_NEAR(static_cast<double>(s[i].timestamp_us - s[i - 1].timestamp_us), 166667, 1);
    }
  }
  // Same instant: nothing new (the driver answers NOT_FOUND), an empty list and no error.
  auto again = backend->Snapshot();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->gpus[0].util_samples.empty());
  EXPECT_TRUE(again->reason.empty()) << again->reason;
  SetTime(10.5);
  auto half = backend->Snapshot();
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->gpus[0].util_samples.size(), 3u);
  // Long after: only what the driver still buffers (120 samples, 20 s), across the phase edge
  // at 90 s (12% -> 97%), oldest first.
  SetTime(100);
  auto late = backend->Snapshot();
  ASSERT_TRUE(late.ok());
  const std::vector<UtilSample>& l = late->gpus[3].util_samples;
  ASSERT_EQ(l.size(), 120u);
  EXPECT_EQ(l.front().percent, 12u);
  EXPECT_EQ(l.back().percent, 97u);
  EXPECT_EQ(l.back().timestamp_us, epoch_us + 100000000);
  EXPECT_LT(l.front().timestamp_us, l.back().timestamp_us);
}

TEST_F(NvmlSimTest, DriverWithoutUtilisationSamplesGivesNoneAndNoError) {
  std::string path = (dir_ / "nosamples.toml").string();
  std::ofstream(path) << R"([scenario]
name = "no-samples"
[[gpu]]
name = "Old GPU"
memory_total_mib = 1024
power_limit_w = 100
max_sm_clock_mhz = 1000
max_mem_clock_mhz = 1000
utilization = 50
unsupported = ["utilization"]
[[gpu]]
name = "MIG GPU"
memory_total_mib = 1024
power_limit_w = 100
max_sm_clock_mhz = 1000
max_mem_clock_mhz = 1000
utilization = 50
mig = true
)";
  SetTime(5);
  auto backend = Open(path);
  ASSERT_TRUE(backend);
  for (double t : {5.0, 6.0, 7.0}) {
    SetTime(t);
    auto snap = backend->Snapshot();
    ASSERT_TRUE(snap.ok());
    EXPECT_TRUE(snap->reason.empty()) << snap->reason;  // not a failed reading
    ASSERT_EQ(snap->gpus.size(), 2u);
    EXPECT_TRUE(snap->gpus[0].util_samples.empty());
    EXPECT_FALSE(snap->gpus[0].gpu_util_percent);
    EXPECT_TRUE(snap->gpus[1].util_samples.empty());
    EXPECT_EQ(snap->gpus[1].gpu_util_percent, 50u);
  }
}

// The monitor's sample observer sees every driver sample once, in order, even when a client's
// fresh query read some of them in between.
TEST_F(NvmlSimTest, SampleObserverGetsEveryDriverSampleOnce) {
  SetTime(10);
  auto backend = Open(Scenario("h100x8-training"));
  ASSERT_TRUE(backend);
  FakeClock clock;
  Monitor monitor(std::move(backend), clock);
  std::vector<std::vector<UtilSample>> seen;
  monitor.SetSampleObserver(
      [&](const GpuSnapshot& snap) { seen.push_back(snap.gpus[0].util_samples); });
  ASSERT_TRUE(monitor.SampleOnce().ok());
  SetTime(11);
  auto fresh = monitor.QueryGpus(/*use_cache=*/false);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->gpus[0].util_samples.size(), 6u);
  SetTime(12);
  ASSERT_TRUE(monitor.SampleOnce().ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].size(), 61u);
  ASSERT_EQ(seen[1].size(), 12u);  // 6 carried over from the query + 6 new
  for (size_t i = 1; i < seen[1].size(); ++i) {
    EXPECT_LT(seen[1][i - 1].timestamp_us, seen[1][i].timestamp_us);
  }
  EXPECT_GT(seen[1].front().timestamp_us, seen[0].back().timestamp_us);
  monitor.SetSampleObserver(nullptr);
  ASSERT_TRUE(monitor.SampleOnce().ok());
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(NvmlSimTest, BrokenScenarioRefusesToInitialise) {
  std::string bad = (dir_ / "bad.toml").string();
  std::ofstream(bad) << "[scenario]\nname = \"x\"\n[[gpu]]\nname = \"g\"\n";
  setenv("FLYT_SIM_SCENARIO", bad.c_str(), 1);
  auto backend = OpenNvmlBackend({SimLibrary(), "/proc"});
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("nvmlInit_v2"), std::string::npos);
  EXPECT_NE(backend.status().message().find("NVML_ERROR_DRIVER_NOT_LOADED"), std::string::npos);
}

TEST_F(NvmlSimTest, NoLibraryNoSmiReportsZeroGpusWithTheReason) {
  BackendOptions options;
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  options.nvidia_smi = "/nonexistent/nvidia-smi";
  auto backend = OpenBackend(options);
  auto snap = backend->Snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->source, Source::kNone);
  EXPECT_TRUE(snap->gpus.empty());
  EXPECT_NE(snap->reason.find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos);
  EXPECT_NE(snap->reason.find("nvidia-smi not found"), std::string::npos);
}

}  // namespace
}  // namespace flyt::gpu
