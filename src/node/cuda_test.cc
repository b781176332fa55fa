// The node manager's side of the CUDA tracer over a fake TraceService: the flyt_cuda_* families of
// /metrics, GET /api/v1/processes (+ /{pid}/cuda) and /api/v1/trace, the heartbeat's "cuda"
// array, and the feeding of GPUs and NVML processes to the tracer.
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/clock.h"
#include "common/mutex.h"
#include "gpu/monitor.h"
#include "trace/json.h"
#include "node/heartbeat.h"
#include "node/metrics.h"
#include "node/server.h"
#include "node/tracing.h"

namespace flyt::node {
namespace {

using nlohmann::json;

class FakeTrace final : public trace::TraceService {
 public:
  trace::TracerHealth Health() const override {
    MutexLock lock(mu_);
    return health_;
  }
  std::vector<trace::ProcessCuda> Processes() const override {
    MutexLock lock(mu_);
    return processes_;
  }
  void SetGpus(std::vector<trace::GpuIdentity> gpus) override {
    MutexLock lock(mu_);
    gpus_ = std::move(gpus);
    ++set_gpus_calls_;
  }
  void SetNvmlProcesses(std::map<uint32_t, std::set<std::string>> p) override {
    MutexLock lock(mu_);
    nvml_ = std::move(p);
    ++set_nvml_calls_;
  }
  void Stop() override {
    MutexLock lock(mu_);
    ++stops_;
  }

  mutable Mutex mu_;
  trace::TracerHealth health_ FLYT_GUARDED_BY(mu_);
  std::vector<trace::ProcessCuda> processes_ FLYT_GUARDED_BY(mu_);
  std::vector<trace::GpuIdentity> gpus_ FLYT_GUARDED_BY(mu_);
  std::map<uint32_t, std::set<std::string>> nvml_ FLYT_GUARDED_BY(mu_);
  int set_gpus_calls_ FLYT_GUARDED_BY(mu_) = 0;
  int set_nvml_calls_ FLYT_GUARDED_BY(mu_) = 0;
  int stops_ FLYT_GUARDED_BY(mu_) = 0;
};

// pid 41000 on GPU-0 (NVML sees it too), pid 42000 through flyt's remote runtime (only traced),
// pid 43000 exited with a leak.
std::vector<trace::ProcessCuda> Traced() {
  trace::ProcessCuda a;
  a.pid = 41000;
  a.comm = "train \"x\"\n";
  a.gpu_uuid = "GPU-0";
  a.container_id = "abc123";
  a.launches = 1200;
  a.launches_per_second = 120.5;
  a.busy_seconds = 3.25;
  a.core_usage = 512;
  a.syncs = 7;
  a.device_memory_bytes = 1 << 20;
  a.device_memory_peak_bytes = 4 << 20;
  a.pinned_host_bytes = 4096;
  a.copies.host_to_device = 1000;
  a.copies.device_to_host = 500;
  a.copies.device_to_device = 250;
  a.failures["cudaErrorMemoryAllocation"] = 3;
  trace::KernelStats k;
  k.name = "void axpy<float>(float, float const*, float*)";
  k.launches = 1000;
  trace::LaunchShape shape;
  shape.grid[0] = 256;
  shape.grid[1] = shape.grid[2] = 1;
  shape.block[0] = 128;
  shape.block[1] = shape.block[2] = 1;
  shape.launches = 1000;
  k.shapes.push_back(shape);
  trace::KernelStats other;
  other.name = "other";
  other.launches = 200;
  a.top_kernels = {k, other};
  trace::StreamStats st;
  st.handle = 0x1234;
  st.non_blocking = true;
  st.launches = 1200;
  st.syncs = 7;
  st.busy_seconds = 3.25;
  a.streams.push_back(st);
  trace::ProcessCuda r;
  r.pid = 42000;
  r.comm = "remote";
  r.remote = true;
  r.remote_server = "gpu-server:12500";
  r.launches = 10;
  trace::ProcessCuda x;
  x.pid = 43000;
  x.comm = "leaky";
  x.gpu_uuid = "GPU-1";
  x.launches = 5;
  x.exited = true;
  x.exit_code = 1;
  x.device_memory_bytes = 8192;
  x.device_memory_peak_bytes = 8192;
  x.leaked_bytes = 8192;
  x.leaked_allocations = 2;
  return {a, r, x};
}

trace::TracerHealth Healthy() {
  trace::TracerHealth h;
  h.enabled = true;
  h.events_received = 12345;
  h.events_lost = 2;
  h.attach_failures["no symbol"] = 1;
  h.libraries_probed = 3;
  h.processes_traced = 4;
  h.processes_tracked = 3;
  h.dropped_streams = 9;
  h.unprobeable.push_back({77, "/opt/static-app", "stripped static binary"});
  return h;
}

// Two GPUs; GPU 0 runs pid 41000 as NVML sees it.
class TwoGpusWithAProcess final : public gpu::Backend {
 public:
  gpu::Source source() const override { return gpu::Source::kNvml; }
  Result<gpu::GpuSnapshot> Snapshot() override {
    gpu::GpuSnapshot snap;
    snap.source = gpu::Source::kNvml;
    for (uint32_t i = 0; i < 2; ++i) {
      gpu::GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      g.pci_bus_id = "00000000:1" + std::to_string(i) + ":00.0";
      g.name = "NVIDIA H100";
      if (i == 1) g.cores = 16896;  // GPU 0's driver does not say
      if (i == 0) {
        gpu::ProcessInfo p;
        p.pid = 41000;
        p.name = "train";
        p.used_memory_bytes = 2 << 20;
        g.processes.push_back(p);
      }
      snap.gpus.push_back(g);
    }
    return snap;
  }
};

TEST(CudaMetricsTest, FamiliesLabelsAndEscaping) {
  gpu::GpuSnapshot snap = *TwoGpusWithAProcess().Snapshot();
  const trace::TracerHealth health = Healthy();
  const std::vector<trace::ProcessCuda> procs = Traced();
  MetricsInput in;
  in.snapshot = &snap;
  in.cuda_health = &health;
  in.cuda_processes = &procs;
  const std::string out = RenderMetrics(in);
  const std::string a =
      R"(gpu="0",UUID="GPU-0",cuda_device="0",pid="41000",comm="train \"x\"\n",container="abc123")";
  EXPECT_NE(out.find("flyt_cuda_kernel_launches_total{" + a + "} 1200\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("flyt_cuda_launches_per_second{" + a + "} 120.5\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_busy_seconds_total{" + a + "} 3.25\n"), std::string::npos);
  EXPECT_NE(out.find("enqueue->sync spans, host-side"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_core_usage{" + a + "} 512\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_device_memory_bytes{" + a + "} 1048576\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_device_memory_peak_bytes{" + a + "} 4194304\n"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_pinned_host_memory_bytes{" + a + "} 4096\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_copy_bytes_total{" + a + ",direction=\"h2d\"} 1000\n"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_copy_bytes_total{" + a + ",direction=\"d2h\"} 500\n"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_syncs_total{" + a + "} 7\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_failed_calls_total{" + a +
                     ",error=\"cudaErrorMemoryAllocation\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_kernel_launches_by_kernel_total{" + a +
                     ",kernel=\"void axpy<float>(float, float const*, float*)\"} 1000\n"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_kernel_launches_by_kernel_total{" + a + ",kernel=\"other\"} 200\n"),
            std::string::npos);
  // The remote runtime's process: no GPU of this node.
  EXPECT_NE(out.find(R"(flyt_cuda_kernel_launches_total{gpu="",UUID="",cuda_device="0",pid="42000",comm="remote",container=""} 10)"),
            std::string::npos);
  // Leaks only for exited processes; no "current" memory for them.
  const std::string x =
      R"(gpu="1",UUID="GPU-1",cuda_device="0",pid="43000",comm="leaky",container="")";
  EXPECT_NE(out.find("flyt_cuda_leaked_bytes{" + x + "} 8192\n"), std::string::npos);
  EXPECT_EQ(out.find("flyt_cuda_leaked_bytes{" + a), std::string::npos);
  EXPECT_EQ(out.find("flyt_cuda_device_memory_bytes{" + x), std::string::npos);
  // Health.
  EXPECT_NE(out.find("flyt_cuda_tracer_enabled 1\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_events_received_total 12345\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_events_lost_total 2\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_attach_failures_total{reason=\"no symbol\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_libraries_probed 3\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_processes_tracked 3\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_dropped_total{what=\"streams\"} 9\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_cuda_tracer_unprobeable_processes 1\n"), std::string::npos);
  // Every family once, with HELP and TYPE.
  for (const char* family : {"flyt_cuda_kernel_launches_total", "flyt_cuda_copy_bytes_total",
                             "flyt_cuda_tracer_enabled"}) {
    const std::string help = std::string("# HELP ") + family + " ";
    EXPECT_NE(out.find(help), std::string::npos) << family;
    EXPECT_EQ(out.find(help), out.rfind(help)) << family;
  }
}

TEST(CudaMetricsTest, TracingOffShowsOnlyTheHealth) {
  trace::TracerHealth off;
  off.disabled_reason = "no CAP_BPF";
  std::vector<trace::ProcessCuda> none;
  MetricsInput in;
  in.cuda_health = &off;
  in.cuda_processes = &none;
  const std::string out = RenderMetrics(in);
  EXPECT_NE(out.find("flyt_cuda_tracer_enabled 0\n"), std::string::npos);
  EXPECT_EQ(out.find("flyt_cuda_kernel_launches_total"), std::string::npos);
  MetricsInput no_tracer;
  EXPECT_EQ(RenderMetrics(no_tracer).find("flyt_cuda_"), std::string::npos);
}

TEST(CudaJsonTest, TheDetailShape) {
  const json j = ToJson(Traced()[0]);
  EXPECT_EQ(j["pid"], 41000);
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["grid"], json::array({256, 1, 1}));
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["block"], json::array({128, 1, 1}));
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["launches"], 1000);
  EXPECT_EQ(j["copies"]["host_to_device"], 1000);
  EXPECT_EQ(j["failures"]["cudaErrorMemoryAllocation"], 3);
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(j["streams"][0]["handle"], 0x1234);
  EXPECT_TRUE(j["first_seen"].is_string());
  EXPECT_EQ(ToJson(Traced()[2])["exit_code"], 1);
  const json h = ToJson(Healthy());
  EXPECT_EQ(h["events_lost"], 2);
  EXPECT_EQ(h["attach_failures"]["no symbol"], 1);
  EXPECT_EQ(h["unprobeable"][0]["pid"], 77);
}

TEST(CudaHeartbeatTest, SummariesBusiestFirstAndBounded) {
  std::vector<trace::ProcessCuda> many;
  for (uint32_t i = 0; i < kMaxCudaPerHeartbeat + 10; ++i) {
    trace::ProcessCuda p;
    p.pid = 1000 + i;
    p.launches = i;
    many.push_back(p);
  }
  const json out = CudaHeartbeatJson(many);
  ASSERT_EQ(out.size(), kMaxCudaPerHeartbeat);
  EXPECT_EQ(out[0]["pid"], 1000 + kMaxCudaPerHeartbeat + 9);
  const json one = CudaHeartbeatJson({Traced()[0]})[0];
  for (const char* key : {"pid", "gpu_uuid", "launches", "launches_per_second",
                          "device_memory_bytes", "device_memory_peak_bytes", "leaked_bytes",
                          "busy_seconds", "core_usage"}) {
    EXPECT_TRUE(one.contains(key)) << key;
  }
  EXPECT_EQ(one["launches_per_second"], 120.5);
}

TEST(CudaTracingTest, FeedsGpusOnChangeAndNvmlProcessesEverySample) {
  auto fake = std::make_unique<FakeTrace>();
  FakeTrace* f = fake.get();
  CudaTracing tracing(std::move(fake), trace::TraceMode::kAuto);
  gpu::GpuSnapshot snap = *TwoGpusWithAProcess().Snapshot();
  tracing.Feed(snap);
  tracing.Feed(snap);
  {
    MutexLock lock(f->mu_);
    EXPECT_EQ(f->set_gpus_calls_, 1);
    EXPECT_EQ(f->set_nvml_calls_, 2);
    ASSERT_EQ(f->gpus_.size(), 2u);
    EXPECT_EQ(f->gpus_[1].uuid, "GPU-1");
    EXPECT_EQ(f->gpus_[1].pci_bus_id, "00000000:11:00.0");
    EXPECT_EQ(f->gpus_[1].name, "NVIDIA H100");
    EXPECT_EQ(f->gpus_[1].cores, 16896u);  // NVML's core count: the tracer's core usage
    EXPECT_FALSE(f->gpus_[0].cores);
    EXPECT_EQ(f->nvml_.at(41000), std::set<std::string>{"GPU-0"});
  }
  snap.gpus.pop_back();
  tracing.Feed(snap);
  {
    MutexLock lock(f->mu_);
    EXPECT_EQ(f->set_gpus_calls_, 2);
  }
  tracing.Stop();
  tracing.Stop();
  MutexLock lock(f->mu_);
  EXPECT_EQ(f->stops_, 1);
}

TEST(CudaTracingTest, TheOffLineSaysWhyAndWarnsOnlyWhenAskedFor) {
  trace::TracerHealth off;
  off.disabled_reason = "no BTF at /sys/kernel/btf/vmlinux";
  bool warn = true;
  std::string line = TracingOffMessage(off, trace::TraceMode::kAuto, warn);
  EXPECT_FALSE(warn);
  EXPECT_NE(line.find("no BTF"), std::string::npos);
  line = TracingOffMessage(off, trace::TraceMode::kOn, warn);
  EXPECT_TRUE(warn);
  EXPECT_NE(line.find("enabled = true"), std::string::npos);
}

class CudaServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(monitor_.SampleOnce().ok());
    {
      MutexLock lock(fake_.mu_);
      fake_.health_ = Healthy();
      fake_.processes_ = Traced();
    }
    NodeConfig config;
    config.listen_port = 0;
    config.bearer_token = "tok";
    server_ = std::make_unique<NodeServer>(monitor_, config, clock_, "test", &fake_);
    ASSERT_TRUE(server_->Start().ok());
  }

  std::pair<int, json> Get(const std::string& path, const std::string& token = "tok") {
    httplib::Client client("127.0.0.1", server_->port());
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto res = client.Get(path.c_str(), headers);
    if (!res) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }

  FakeClock clock_;
  gpu::Monitor monitor_{std::make_unique<TwoGpusWithAProcess>(), clock_};
  FakeTrace fake_;
  std::unique_ptr<NodeServer> server_;
};

TEST_F(CudaServerTest, ProcessesCarryTheTracedFiguresAndTraceOnlyOnes) {
  auto [status, body] = Get("/api/v1/processes");
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["tracing"], true);
  const json& list = body["processes"];
  ASSERT_EQ(list.size(), 3u) << body;
  EXPECT_EQ(list[0]["pid"], 41000);
  EXPECT_EQ(list[0]["source"], "nvml");
  EXPECT_EQ(list[0]["used_memory_bytes"], 2 << 20);
  EXPECT_EQ(list[0]["cuda"]["launches"], 1200);
  EXPECT_EQ(list[0]["cuda"]["device_memory_peak_bytes"], 4 << 20);
  EXPECT_EQ(list[0]["cuda"]["top_kernel"], "void axpy<float>(float, float const*, float*)");
  EXPECT_FALSE(list[0]["cuda"].contains("streams"));
  EXPECT_EQ(list[1]["pid"], 42000);
  EXPECT_EQ(list[1]["source"], "trace");
  EXPECT_TRUE(list[1]["gpu"].is_null());
  EXPECT_EQ(list[1]["cuda"]["remote"], true);
  EXPECT_EQ(list[2]["pid"], 43000);
  EXPECT_EQ(list[2]["gpu"], 1);
  EXPECT_EQ(list[2]["cuda"]["leaked_bytes"], 8192);
}

TEST_F(CudaServerTest, TheDetailOfOnePid) {
  auto [status, body] = Get("/api/v1/processes/41000/cuda");
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["pid"], 41000);
  ASSERT_EQ(body["processes"].size(), 1u);
  EXPECT_EQ(body["processes"][0]["top_kernels"].size(), 2u);
  EXPECT_EQ(body["processes"][0]["streams"][0]["non_blocking"], true);
  auto [missing, error] = Get("/api/v1/processes/999/cuda");
  EXPECT_EQ(missing, 404);
  EXPECT_EQ(error["code"], "not_found");
  auto [bad, error2] = Get("/api/v1/processes/x1/cuda");
  EXPECT_EQ(bad, 400);
  EXPECT_EQ(error2["code"], "invalid_argument");
  EXPECT_EQ(Get("/api/v1/processes/41000/cuda", "").first, 401);
}

TEST_F(CudaServerTest, TracerHealthAndMetrics) {
  auto [status, body] = Get("/api/v1/trace");
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["enabled"], true);
  EXPECT_EQ(body["events_received"], 12345);
  EXPECT_EQ(Get("/api/v1/trace", "wrong").first, 401);
  httplib::Client client("127.0.0.1", server_->port());
  auto res = client.Get("/metrics", {{"Authorization", "Bearer tok"}});
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("flyt_cuda_kernel_launches_total{gpu=\"0\""), std::string::npos);
  EXPECT_NE(res->body.find("flyt_cuda_tracer_enabled 1"), std::string::npos);
}

}  // namespace
}  // namespace flyt::node
