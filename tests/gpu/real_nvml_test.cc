// Hardware truth: the NVML binding against the machine's real libnvidia-ml.so.1, cross-checked
// with nvidia-smi. Skips (GTEST_SKIP, reported as skipped by CTest) where there is no driver.
// Results on real GPUs are recorded in docs/hardware-verification.md.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "common/clock.h"
#include "common/subprocess.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "gpu/smi_backend.h"
#include "nvml/library.h"

namespace flyt::gpu {
namespace {

class RealNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = OpenNvmlBackend({"libnvidia-ml.so.1", "/proc"});
    if (!backend.ok()) GTEST_SKIP() << "no NVIDIA driver here: " << backend.status().message();
    backend_ = std::move(backend).value();
  }
  std::unique_ptr<Backend> backend_;
};

TEST_F(RealNvmlTest, EveryGpuReadsPlausibleValues) {
  auto lib = nvml::Library::Load("libnvidia-ml.so.1");
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ((*lib)->BoundSymbol("Init"), "nvmlInit_v2");
  EXPECT_FALSE((*lib)->SimulatedScenario());  // real NVML is never reported as simulated

  auto snap = backend_->Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  ASSERT_FALSE(snap->gpus.empty());
  EXPECT_TRUE(snap->driver_version);
  EXPECT_TRUE(snap->cuda_driver_version);
  for (const GpuInfo& g : snap->gpus) {
    SCOPED_TRACE(g.name + " " + g.uuid);
    EXPECT_FALSE(g.lost);
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u);
    EXPECT_FALSE(g.name.empty());
    EXPECT_EQ(g.pci_bus_id.size(), 16u);  // 00000000:18:00.0
    ASSERT_TRUE(g.memory_total_bytes);
    ASSERT_TRUE(g.memory_used_bytes && g.memory_free_bytes);
    uint64_t accounted =
        *g.memory_used_bytes + *g.memory_free_bytes + g.memory_reserved_bytes.value_or(0);
    EXPECT_NEAR(static_cast<double>(accounted), static_cast<double>(*g.memory_total_bytes),
                0.01 * static_cast<double>(*g.memory_total_bytes));
    if (g.gpu_util_percent) {
      EXPECT_LE(*g.gpu_util_percent, 100u);
    }
    if (g.temperature_c) {
      EXPECT_GT(*g.temperature_c, 0u);
      EXPECT_LT(*g.temperature_c, 120u);
    }
    if (g.power_draw_mw && g.power_limit_mw) {
      EXPECT_LT(*g.power_draw_mw, *g.power_limit_mw * 3 / 2);
    }
    if (g.sm_clock_mhz && g.max_sm_clock_mhz) {
      EXPECT_LE(*g.sm_clock_mhz, *g.max_sm_clock_mhz);
    }
  }
}

// The driver's buffered utilisation samples (nvmlDeviceGetSamples), which the usage profiles read
// at up to ~6 Hz: each snapshot brings only samples newer than the last one read, oldest first,
// as percentages. A GPU whose driver keeps none (MIG, vGPU) brings none, silently.
TEST_F(RealNvmlTest, DriverUtilisationSamplesArriveOnceEachInOrder) {
  auto first = backend_->Snapshot();
  ASSERT_TRUE(first.ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto second = backend_->Snapshot();
  ASSERT_TRUE(second.ok());
  size_t gpus_with_samples = 0;
  for (size_t i = 0; i < second->gpus.size(); ++i) {
    const GpuInfo& g = second->gpus[i];
    SCOPED_TRACE(g.name + " " + g.uuid);
    if (g.util_samples.empty()) continue;
    ++gpus_with_samples;
    // Two seconds at the driver's rate (~6 Hz on recent GPUs, at least 1 Hz).
    EXPECT_GE(g.util_samples.size(), 2u);
    uint64_t newest_before = 0;
    for (const GpuInfo& f : first->gpus) {
      if (f.uuid == g.uuid && !f.util_samples.empty()) {
        newest_before = f.util_samples.back().timestamp_us;
      }
    }
    uint64_t previous = newest_before;
    for (const UtilSample& u : g.util_samples) {
      EXPECT_GT(u.timestamp_us, previous);  // newer than anything read before, in order
      EXPECT_LE(u.percent, 100u);
      previous = u.timestamp_us;
    }
  }
  std::cout << gpus_with_samples << " of " << second->gpus.size()
            << " GPU(s) gave driver utilisation samples\n";
}

TEST_F(RealNvmlTest, NvmlAndNvidiaSmiAgree) {
  if (FindOnPath("nvidia-smi").empty()) GTEST_SKIP() << "nvidia-smi is not on PATH";
  auto nvml = backend_->Snapshot();
  auto smi = MakeSmiBackend({})->Snapshot();
  ASSERT_TRUE(nvml.ok());
  ASSERT_TRUE(smi.ok()) << smi.status().ToString();
  ASSERT_EQ(nvml->gpus.size(), smi->gpus.size());
  for (size_t i = 0; i < nvml->gpus.size(); ++i) {
    const GpuInfo& a = nvml->gpus[i];
    const GpuInfo& b = smi->gpus[i];
    EXPECT_EQ(a.uuid, b.uuid);
    EXPECT_EQ(a.name, b.name);
    ASSERT_TRUE(a.memory_total_bytes && b.memory_total_bytes);
    EXPECT_NEAR(static_cast<double>(*a.memory_total_bytes),
                static_cast<double>(*b.memory_total_bytes), 1024.0 * 1024.0);
    EXPECT_EQ(a.max_sm_clock_mhz, b.max_sm_clock_mhz);
  }
  EXPECT_EQ(nvml->driver_version, smi->driver_version);
}

TEST_F(RealNvmlTest, MonitorSamplesAndEventsRun) {
  Monitor monitor(std::move(backend_), SystemClock::Instance());
  auto id = monitor.StartSession();
  ASSERT_TRUE(id.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(monitor.SampleOnce().ok());
  (void)monitor.PollEvents(std::chrono::milliseconds(100));
  auto stats = monitor.StopSession(*id);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sample_count, 3u);
  EXPECT_FALSE(stats->gpu_stats.empty());
  for (const auto& [index, g] : stats->gpu_stats) EXPECT_TRUE(g.memory_used_mb) << index;
}

}  // namespace
}  // namespace flyt::gpu
