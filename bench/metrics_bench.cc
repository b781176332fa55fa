// Render time of /metrics for 8 GPUs with 200 processes (25 per GPU), without HTTP.
//   build/bin/flyt-bench-metrics --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "node/metrics.h"

namespace {

flyt::gpu::GpuSnapshot Node() {
  flyt::gpu::GpuSnapshot s;
  s.driver_version = "580.65.06";
  for (uint32_t i = 0; i < 8; ++i) {
    flyt::gpu::GpuInfo g;
    g.index = i;
    g.uuid = "GPU-5f1c2d3e-8a9b-4c0d-9e1f-2a3b4c5d6e7" + std::to_string(i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.pci_bus_id = "00000000:18:00.0";
    g.gpu_util_percent = 97;
    g.memory_util_percent = 61;
    g.memory_used_bytes = 73220ULL << 20;
    g.memory_free_bytes = 7810ULL << 20;
    g.memory_reserved_bytes = 529ULL << 20;
    g.temperature_c = 67;
    g.power_draw_mw = 661760;
    g.energy_mj = 123456789012;
    g.sm_clock_mhz = 1980;
    g.memory_clock_mhz = 2619;
    g.pcie_replay_count = 0;
    g.encoder_util_percent = 0;
    g.decoder_util_percent = 0;
    for (uint32_t p = 0; p < 25; ++p) {
      flyt::gpu::ProcessInfo proc;
      proc.pid = 40000 + i * 25 + p;
      proc.name = "python3";
      proc.user = "alice";
      proc.used_memory_bytes = 2048ULL << 20;
      proc.sm_util_percent = 4;
      g.processes.push_back(proc);
    }
    s.gpus.push_back(g);
  }
  return s;
}

void BM_RenderMetrics(benchmark::State& state) {
  flyt::gpu::GpuSnapshot snap = Node();
  flyt::node::MetricsInput in;
  in.snapshot = &snap;
  in.events_supported = true;
  in.hostname = "gpu-node-01";
  in.node_name = "gpu-node-01";
  in.version = "0.1.0";
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out = flyt::node::RenderMetrics(in);
    bytes = out.size();
    benchmark::DoNotOptimize(out);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderMetrics)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
