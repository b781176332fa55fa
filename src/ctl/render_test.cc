#include "ctl/render.h"

#include <gtest/gtest.h>

namespace flyt::ctl {
namespace {

gpu::GpuSnapshot Snapshot() {
  gpu::GpuSnapshot s;
  s.source = gpu::Source::kNvml;
  s.driver_version = "580.65.06";
  s.cuda_driver_version = "13.0";
  gpu::GpuInfo a;
  a.index = 0;
  a.name = "NVIDIA H100 80GB HBM3";
  a.temperature_c = 65;
  a.gpu_util_percent = 97;
  a.memory_used_bytes = 73220ULL << 20;
  a.memory_total_bytes = 81559ULL << 20;
  a.power_draw_mw = 650000;
  a.power_limit_mw = 700000;
  gpu::ProcessInfo p;
  p.pid = 41000;
  p.user = "alice";
  p.command = "python train.py";
  p.used_memory_bytes = 73216ULL << 20;
  p.sm_util_percent = 97;
  a.processes.push_back(p);
  gpu::GpuInfo b;
  b.index = 1;
  b.name = "NVIDIA A100-SXM4-80GB";
  b.gpu_util_percent = 40;
  b.memory_used_bytes = 1ULL << 30;
  b.memory_total_bytes = 80ULL << 30;
  b.power_limit_mw = 400000;  // draw absent: unsupported
  gpu::GpuInfo c;
  c.index = 2;
  c.name = "NVIDIA A100-SXM4-80GB";
  c.lost = true;
  s.gpus = {a, b, c};
  return s;
}

TEST(RenderTest, TableShowsValuesProcessesAbsentAndLost) {
  std::string out = RenderSnapshot(Snapshot(), {});
  EXPECT_NE(out.find("NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(out.find("65°C"), std::string::npos);
  EXPECT_NE(out.find("97%"), std::string::npos);
  EXPECT_NE(out.find("73220 / 81559 MiB"), std::string::npos);
  EXPECT_NE(out.find("650 / 700 W"), std::string::npos);
  EXPECT_NE(out.find("41000"), std::string::npos);
  EXPECT_NE(out.find("alice"), std::string::npos);
  EXPECT_NE(out.find("python train.py"), std::string::npos);
  EXPECT_NE(out.find("- / 400 W"), std::string::npos);  // absent power draw is "-", not 0
  EXPECT_NE(out.find("LOST"), std::string::npos);
  EXPECT_EQ(out.find("SIMULATED"), std::string::npos);
  EXPECT_EQ(out.find("\033["), std::string::npos);  // no colour unless asked
}

TEST(RenderTest, EscapeSequencesFromProcessTitlesAreNotPassedToTheTerminal) {
  gpu::GpuSnapshot s = Snapshot();
  s.gpus[0].processes[0].command = "python \033]52;c;ZXZpbA==\007 train.py";
  std::string out = RenderSnapshot(s, {});
  EXPECT_EQ(out.find('\033'), std::string::npos);
  EXPECT_EQ(out.find('\007'), std::string::npos);
  EXPECT_NE(out.find("python ?]52;c;ZXZpbA==? train.py"), std::string::npos);
}

TEST(RenderTest, SimulatedGpusAlwaysCarryTheBanner) {
  gpu::GpuSnapshot s = Snapshot();
  s.simulated_scenario = "sim/scenarios/h100x8-training.toml";
  std::string out = RenderSnapshot(s, {});
  EXPECT_EQ(out.rfind("SIMULATED GPUs", 0), 0u);
  EXPECT_NE(out.find("h100x8-training.toml"), std::string::npos);
}

TEST(RenderTest, NoGpusSaysWhy) {
  gpu::GpuSnapshot s;
  s.reason = "no GPUs readable: NVML unavailable (cannot load libnvidia-ml.so.1)";
  std::string out = RenderSnapshot(s, {});
  EXPECT_NE(out.find("No GPUs: no GPUs readable: NVML unavailable"), std::string::npos);
}

}  // namespace
}  // namespace flyt::ctl
