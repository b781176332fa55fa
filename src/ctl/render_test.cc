#include "ctl/render.h"

#include <gtest/gtest.h>

#include <chrono>

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

TEST(RenderTest, TheBannerCanBeLeftToTheCaller) {
  gpu::GpuSnapshot s = Snapshot();
  s.simulated_scenario = "sim/scenarios/h100x8-training.toml";
  RenderOptions o;
  o.simulated_banner = false;
  EXPECT_EQ(RenderSnapshot(s, o).find("SIMULATED"), std::string::npos);
  EXPECT_EQ(RenderProcesses(s, o).find("SIMULATED"), std::string::npos);
  EXPECT_EQ(RenderProcesses(s, {}).rfind("SIMULATED GPUs", 0), 0u);
}

TEST(RenderTest, ClusterProcessesCarryTheirNode) {
  nlohmann::json nodes = {{"nodes", {{{"name", "sim-a"}, {"simulated_scenario", "x.toml"}}}}};
  std::string out = RenderClusterProcesses({{"sim-a", Snapshot()}, {"real-b", Snapshot()}}, nodes);
  EXPECT_EQ(out.rfind("SIMULATED GPUs on sim-a", 0), 0u);
  EXPECT_NE(out.find("NODE"), std::string::npos);
  EXPECT_NE(out.find("sim-a              0    41000  alice"), std::string::npos) << out;
  EXPECT_NE(out.find("real-b             0    41000  alice"), std::string::npos) << out;
  gpu::GpuSnapshot idle = Snapshot();
  for (auto& g : idle.gpus) g.processes.clear();
  EXPECT_NE(
      RenderClusterProcesses({{"a", idle}}, nullptr).find("No processes on 3 GPU(s) of 1 node(s)"),
      std::string::npos);
  EXPECT_NE(RenderClusterProcesses({}, nullptr).find("No nodes"), std::string::npos);
}

TEST(RenderTest, NoGpusSaysWhy) {
  gpu::GpuSnapshot s;
  s.reason = "no GPUs readable: NVML unavailable (cannot load libnvidia-ml.so.1)";
  std::string out = RenderSnapshot(s, {});
  EXPECT_NE(out.find("No GPUs: no GPUs readable: NVML unavailable"), std::string::npos);
}

// ---- the cluster manager's answers ----------------------------------------------------------

using nlohmann::json;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The line of `text` that contains `what` ("" when none).
std::string LineWith(const std::string& text, const std::string& what) {
  size_t at = text.find(what);
  if (at == std::string::npos) return "";
  size_t begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

TEST(ClusterRenderTest, ShortModelNamesDropVendorFormFactorAndMemory) {
  EXPECT_EQ(ShortGpuModel("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(ShortGpuModel("Tesla V100-SXM2-16GB"), "V100");
  EXPECT_EQ(ShortGpuModel("NVIDIA A100-SXM4-40GB"), "A100");
  EXPECT_EQ(ShortGpuModel("NVIDIA H100 PCIe"), "H100");
  EXPECT_EQ(ShortGpuModel("NVIDIA L40S"), "L40S");
  EXPECT_EQ(ShortGpuModel("NVIDIA GeForce RTX 4090"), "RTX 4090");
  EXPECT_EQ(ShortGpuModel("NVIDIA RTX A6000"), "RTX A6000");
  EXPECT_EQ(ShortGpuModel("NVIDIA"), "NVIDIA");
  EXPECT_EQ(ShortGpuModel(""), "?");
}

TEST(ClusterRenderTest, DurationsReadAsAPersonWouldSayThem) {
  EXPECT_EQ(HumanDuration(0), "0s");
  EXPECT_EQ(HumanDuration(42.9), "42s");
  EXPECT_EQ(HumanDuration(65), "1m05s");
  EXPECT_EQ(HumanDuration(3600 * 2 + 180), "2h03m");
  EXPECT_EQ(HumanDuration(86400 * 3 + 3600 * 4), "3d04h");
  EXPECT_EQ(HumanDuration(-1), "-");
  EXPECT_EQ(HumanDuration(std::nan("")), "-");
}

json JobsAnswer() {
  return json::parse(R"({"total": 3, "jobs": [
    {"id": "job-815f262fab16", "task_name": "llama-3.1-8b-throughput", "experiment": 1,
     "experiments": 8, "status": "completed", "message": "2310 tok/s at 32 seqs", "gpus": 2,
     "gpu_model": "NVIDIA H100 80GB HBM3", "node": "node-a", "owner": "alice", "priority": 3,
     "has_monitoring": true, "wait_seconds": 0.002, "runtime_seconds": 65.4},
    {"id": "job-62aa1efe9a83", "task_name": "llama-3.1-8b-throughput", "experiment": 2,
     "status": "running", "message": "running on node-b", "gpus": 4,
     "gpu_model": "Tesla V100-SXM2-16GB", "node": "node-b", "owner": "bob", "priority": 0,
     "has_monitoring": false, "wait_seconds": 3725, "runtime_seconds": 12},
    {"id": "job-d32d7a449576", "task_name": "llama-3.1-8b-throughput", "experiment": 4,
     "status": "queued", "message": "no 1 GPU(s) on one node meet the request; node-a: 0 available, 8 leased",
     "gpus": 1, "gpu_model": null, "node": null, "owner": "alice", "priority": 0,
     "has_monitoring": false, "wait_seconds": 30, "runtime_seconds": null}]})");
}

TEST(ClusterRenderTest, JobsShowGpuCountModelAndTheMonitoringMarker) {
  std::string out = RenderJobs(JobsAnswer(), "");
  std::string done = LineWith(out, "job-815f262fab16");
  EXPECT_NE(done.find("2 (H100) 📊"), std::string::npos) << out;
  EXPECT_NE(done.find("llama-3.1-8b-throughput #1"), std::string::npos);
  EXPECT_NE(done.find("completed"), std::string::npos);
  EXPECT_NE(done.find("1m05s"), std::string::npos);  // runtime
  EXPECT_NE(done.find("2310 tok/s at 32 seqs"), std::string::npos);
  std::string running = LineWith(out, "job-62aa1efe9a83");
  EXPECT_NE(running.find("4 (V100) "), std::string::npos);
  EXPECT_EQ(running.find("📊"), std::string::npos);
  EXPECT_NE(running.find("1h02m"), std::string::npos);  // waited
  std::string queued = LineWith(out, "job-d32d7a449576");
  EXPECT_NE(queued.find("queued"), std::string::npos);
  EXPECT_EQ(queued.find("(H100)"), std::string::npos);  // no model before placement
  EXPECT_EQ(queued.find("📊"), std::string::npos);
  EXPECT_NE(queued.find("no 1 GPU(s) on one node"), std::string::npos);
  EXPECT_EQ(Count(out, "\n"), 4u);  // header and three jobs: all of them are shown
}

TEST(ClusterRenderTest, JobsSayWhenMoreExistThanShownOrNoneMatch) {
  json answer = JobsAnswer();
  answer["total"] = 40;
  EXPECT_NE(RenderJobs(answer, "").find("newest 3 of 40 job(s)"), std::string::npos);
  EXPECT_EQ(RenderJobs(json::parse(R"({"jobs": [], "total": 5})"), "failed"), "No failed jobs.\n");
  EXPECT_EQ(RenderJobs(json::parse(R"({"jobs": [], "total": 0})"), ""), "No jobs.\n");
}

TEST(ClusterRenderTest, AnswersOfTheWrongShapeRenderDashesInsteadOfThrowing) {
  json odd = json::parse(R"({"jobs": [{"id": 5, "gpus": "two", "status": null,
      "has_monitoring": "yes", "wait_seconds": "long", "gpu_model": 7}, 3, null]})");
  std::string out;
  ASSERT_NO_THROW(out = RenderJobs(odd, ""));
  EXPECT_NE(out.find("-"), std::string::npos);
  EXPECT_EQ(out.find("📊"), std::string::npos);
  for (const char* text : {"[]", "3", "null", R"({"nodes": 1, "gpus": {}, "queue": "x"})"}) {
    json j = json::parse(text);
    EXPECT_NO_THROW(RenderNodes(j));
    EXPECT_NO_THROW(RenderClusterGpus(j, j));
    EXPECT_NO_THROW(RenderLease(j));
    EXPECT_NO_THROW(RenderAllocations(j));
    EXPECT_NO_THROW(RenderSubmission(j));
    EXPECT_NO_THROW(RenderJob(j, std::chrono::system_clock::now()));
    EXPECT_NO_THROW(RenderJobOutcome(j));
    EXPECT_NO_THROW(RenderQueue(j));
    EXPECT_NO_THROW(RenderEvents(j));
    EXPECT_NO_THROW(RenderNode(j));
  }
}

TEST(ClusterRenderTest, EscapeSequencesFromTheManagerDoNotReachTheTerminal) {
  json answer = JobsAnswer();
  answer["jobs"][0]["message"] =
      "done \033]52;c;ZXZpbA==\007 \xc2\x9b"
      "31m";
  answer["jobs"][0]["task_name"] = "t\033[2J";
  std::string out = RenderJobs(answer, "");
  EXPECT_EQ(out.find('\033'), std::string::npos);
  EXPECT_EQ(out.find('\007'), std::string::npos);
  EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos);  // C1 CSI
  EXPECT_NE(out.find("done ?]52;c;ZXZpbA==? ?31m"), std::string::npos);
  json events = {{"events", {{{"id", 1}, {"kind", "gpu.xid"}, {"message", "x\033[31m"}}}}};
  EXPECT_EQ(RenderEvents(events).find('\033'), std::string::npos);
}

TEST(ClusterRenderTest, NodesShowStateCountsAndWhichAreSimulated) {
  json nodes = json::parse(R"({"nodes": [
    {"name": "node-a", "state": "reachable", "gpu_count": 8, "gpus_leased": 2, "gpus_lost": 0,
     "gpu_model": "NVIDIA H100 80GB HBM3", "seconds_since_heartbeat": 1.2,
     "labels": {"zone": "a"}, "simulated_scenario": "sim/scenarios/h100x8-idle.toml"},
    {"name": "node-b", "state": "unreachable", "gpu_count": 4, "gpus_leased": 0, "gpus_lost": 1,
     "gpu_model": "NVIDIA A100-SXM4-80GB", "seconds_since_heartbeat": 125, "labels": {},
     "simulated_scenario": null}]})");
  std::string out = RenderNodes(nodes);
  EXPECT_EQ(out.rfind("SIMULATED GPUs on node-a", 0), 0u) << out;
  EXPECT_NE(out.find("h100x8-idle.toml"), std::string::npos);
  EXPECT_EQ(out.find("SIMULATED GPUs on node-b"), std::string::npos);
  std::string a = LineWith(out, "node-a  ");
  EXPECT_NE(a.find("reachable"), std::string::npos);
  EXPECT_NE(a.find("zone=a"), std::string::npos);
  EXPECT_NE(a.find("1s ago"), std::string::npos);
  std::string b = LineWith(out, "node-b  ");
  EXPECT_NE(b.find("unreachable"), std::string::npos);
  EXPECT_NE(b.find("2m05s ago"), std::string::npos);
  EXPECT_NE(b.find("NVIDIA A100-SXM4-80GB"), std::string::npos);
  EXPECT_NE(RenderNodes(json::parse(R"({"nodes": []})")).find("No nodes have registered"),
            std::string::npos);
}

TEST(ClusterRenderTest, ClusterGpusShowAllocationStateAndWhoHoldsThem) {
  json gpus = json::parse(R"({"gpus": [
    {"node": "node-a", "index": 0, "name": "NVIDIA H100 80GB HBM3", "allocation_state": "free",
     "temperature_c": 31, "gpu_util_percent": 4, "memory_used_bytes": 2151677952,
     "memory_total_bytes": 85520809984, "power_draw_mw": 95750, "power_limit_mw": 700000,
     "score": 0.965, "leases": [], "lost": false},
    {"node": "node-a", "index": 1, "name": "NVIDIA H100 80GB HBM3", "allocation_state": "leased",
     "temperature_c": 40, "gpu_util_percent": 97, "memory_used_bytes": 4194304,
     "memory_total_bytes": 85520809984, "power_draw_mw": null, "power_limit_mw": 700000,
     "score": 0.45, "leases": [{"lease_id": "lease-1", "owner": "alice", "exclusive": true}]},
    {"node": "node-b", "index": 2, "name": "NVIDIA A100-SXM4-80GB", "allocation_state": "lost",
     "lost": true, "leases": []}]})");
  std::string out = RenderClusterGpus(gpus, json());
  std::string free = LineWith(out, "0.965");
  EXPECT_NE(free.find("free"), std::string::npos) << out;
  EXPECT_NE(free.find("2052 / 81559 MiB"), std::string::npos);
  EXPECT_NE(free.find("96 / 700 W"), std::string::npos);
  std::string leased = LineWith(out, "alice");
  EXPECT_NE(leased.find("leased"), std::string::npos);
  EXPECT_NE(leased.find("alice (lease-1)"), std::string::npos);
  EXPECT_NE(leased.find("- / 700 W"), std::string::npos);  // absent draw is "-", not 0
  EXPECT_NE(LineWith(out, "node-b").find("LOST"), std::string::npos);
  EXPECT_NE(out.find("3 GPU(s): 1 free, 1 leased, 1 lost"), std::string::npos);
  EXPECT_EQ(out.find("SIMULATED"), std::string::npos);
}

json Lease() {
  return json::parse(R"({"id": "lease-536761eb75bf", "owner": "admin", "node": "node-a",
    "exclusive": true, "labels": {"team": "x"}, "expires_at": "2026-11-22T06:02:52.487Z",
    "ttl_seconds": 600, "gpus": [
      {"node": "node-a", "index": 1, "uuid": "GPU-7ed3", "name": "NVIDIA H100 80GB HBM3", "score": 0.98},
      {"node": "node-a", "index": 2, "uuid": "GPU-5ec3", "name": "NVIDIA H100 80GB HBM3", "score": 0.97}]})");
}

TEST(ClusterRenderTest, ALeaseShowsItsIdNodeGpusAndExpiry) {
  std::string out = RenderLease(Lease());
  EXPECT_EQ(out.rfind("lease lease-536761eb75bf: 2 GPU(s) on node-a, exclusive, owner admin\n", 0),
            0u)
      << out;
  EXPECT_NE(out.find("expires 2026-11-22T06:02:52.487Z (TTL 10m00s"), std::string::npos);
  EXPECT_NE(LineWith(out, "GPU-7ed3").find("0.980"), std::string::npos);
  EXPECT_NE(out.find("labels: team=x"), std::string::npos);
  EXPECT_NE(out.find("on node-a: CUDA_VISIBLE_DEVICES=GPU-7ed3,GPU-5ec3\n"), std::string::npos);
}

TEST(ClusterRenderTest, AllocationsListEachLeaseWithItsGpusAndTimeLeft) {
  json lease = Lease();
  lease["expires_in_seconds"] = 65.5;
  lease["job_id"] = "job-1";
  std::string out = RenderAllocations({{"allocations", {lease}}});
  std::string row = LineWith(out, "lease-536761eb75bf");
  for (const char* want : {"admin", "node-a", "1,2", "exclusive", "1m05s", "job-1", "team=x"}) {
    EXPECT_NE(row.find(want), std::string::npos) << want << " in " << out;
  }
  EXPECT_EQ(RenderAllocations({{"allocations", json::array()}}), "No active leases.\n");
}

json CompletedJob() {
  return json::parse(R"js({
    "id": "job-59bfe518acd6", "submission": "sub-d324", "task_name": "llama-3.1-8b-throughput",
    "experiment": 0, "experiments": 8, "model": "meta-llama/Llama-3.1-8B-Instruct",
    "runtime": "vllm", "parameters": {"tp": 1, "max-num-seqs": 32}, "owner": "admin",
    "priority": 0, "status": "completed", "message": "best throughput 4512 tok/s",
    "submitted_at": "2026-11-22T05:52:55.622Z", "submitted_at_ms": 1795326775622,
    "started_at": "2026-11-22T05:52:55.624Z", "started_at_ms": 1795326775624,
    "finished_at": "2026-11-22T05:54:00.824Z", "finished_at_ms": 1795326840824,
    "timeout_seconds": 300,
    "requirement": {"gpus": 1, "min_free_memory_mb": 49621.0, "max_utilization": 100,
      "same_node": true, "gpu_model": "", "policy": "score", "exclusive": true,
      "ttl_seconds": 21600, "min_free_fraction": 0.9, "max_free_spread": 0.0},
    "estimate": {"model_source": "catalog: Llama-3.1-8B", "min_free_memory_mb": 49620.0,
      "memory_per_gpu": {"weights_mib": 15316.0, "kv_cache_mib": 32768.0, "reserve_mib": 1536.0,
        "total_mib": 49620.0},
      "engine_rule": "vllm: 90% of each GPU's memory free (gpu_memory_utilization)"},
    "gpu_info": {"model": "NVIDIA H100 80GB HBM3", "count": 1, "device_ids": [1],
      "world_size": 1, "node": "node-a", "lease_id": "lease-0b47", "allocation_method": "flyt-ledger/score",
      "allocation_details": [{"index": 1, "uuid": "GPU-7ed34953", "name": "NVIDIA H100 80GB HBM3",
        "node": "node-a", "availability_score": 0.976, "allocation_method": "flyt-ledger/score",
        "memory_free_mb": 81026.0, "memory_total_mb": 81559.0, "utilization_percent": 5}]},
    "monitoring_session": null,
    "metrics": {
      "gpu_monitoring": {"monitoring_duration_seconds": 15.6, "sample_count": 16, "gpu_stats": {
        "1": {"name": "NVIDIA H100 80GB HBM3",
              "utilization": {"min": 4, "max": 6, "mean": 5.375, "samples": 16},
              "memory_used_mb": {"min": 4, "max": 4, "mean": 4, "samples": 16},
              "memory_usage_percent": null,
              "temperature_c": {"min": 31, "max": 32, "mean": 31.9, "samples": 16},
              "power_draw_w": {"min": 93.9, "max": 106.6, "mean": 102.8, "samples": 16}}}},
      "throughput_tok_s": 4512.5, "latency": {"p50_ms": 31}}})js");
}

TEST(ClusterRenderTest, AJobShowsStatusRequirementPlacementMonitoringAndMetrics) {
  std::string out = RenderJob(CompletedJob(), std::chrono::system_clock::now());
  EXPECT_EQ(out.rfind("job job-59bfe518acd6 — llama-3.1-8b-throughput, experiment 0 of 8", 0), 0u)
      << out;
  EXPECT_NE(out.find("status:      completed — best throughput 4512 tok/s"), std::string::npos);
  EXPECT_NE(out.find("(catalog: Llama-3.1-8B)"), std::string::npos);
  EXPECT_NE(out.find("max-num-seqs=32 tp=1"), std::string::npos);
  EXPECT_NE(out.find("ran 1m05s"), std::string::npos);
  EXPECT_NE(LineWith(out, "requirement:").find("1 GPU(s) on one node, each ≥ 49621 MiB free"),
            std::string::npos);
  EXPECT_NE(LineWith(out, "estimate:").find("weights 15316 MiB + KV cache 32768 MiB"),
            std::string::npos);
  EXPECT_NE(LineWith(out, "placement:").find("node-a, 1 × NVIDIA H100 80GB HBM3, devices [1]"),
            std::string::npos);
  std::string detail = LineWith(out, "GPU-7ed34953");
  EXPECT_NE(detail.find("0.976"), std::string::npos);
  EXPECT_NE(detail.find("81026"), std::string::npos);
  EXPECT_NE(detail.find("5%"), std::string::npos);
  EXPECT_NE(out.find("📊 GPU monitoring over 15.6 s, 16 samples: mean (min-max) of utilization"),
            std::string::npos);
  std::string monitored = LineWith(out, "5.4 (4-6)");  // utilisation: mean (min-max)
  EXPECT_EQ(monitored.rfind("  1  NVIDIA H100 80GB HBM3", 0), 0u) << out;
  EXPECT_NE(monitored.find("102.8 (94-107)"), std::string::npos);
  EXPECT_NE(LineWith(out, "throughput_tok_s").find("4512.5"), std::string::npos);
  EXPECT_NE(LineWith(out, "latency").find(R"({"p50_ms":31})"), std::string::npos);
}

TEST(ClusterRenderTest, AQueuedJobShowsItsPlaceAndWhyItWaits) {
  json job = CompletedJob();
  job["status"] = "queued";
  job["message"] = "no 1 GPU(s) on one node meet the request; node-a: 0 available, 8 leased";
  job["queue_position"] = 2;
  for (const char* k : {"started_at", "started_at_ms", "finished_at", "finished_at_ms"}) {
    job[k] = nullptr;
  }
  job["gpu_info"] = nullptr;
  job["metrics"] = json::object();
  auto now =
      std::chrono::system_clock::time_point(std::chrono::milliseconds(1795326775622 + 90000));
  std::string out = RenderJob(job, now);
  EXPECT_NE(out.find("status:      queued — no 1 GPU(s) on one node meet the request; node-a: 0 "
                     "available, 8 leased"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("queue:       position 2"), std::string::npos);
  EXPECT_NE(out.find("waiting 1m30s"), std::string::npos);
  EXPECT_EQ(out.find("placement:"), std::string::npos);
  EXPECT_EQ(out.find("📊"), std::string::npos);
}

TEST(ClusterRenderTest, ARunningJobSaysItsMonitoringIsOpenOrWhyItIsNot) {
  json job = CompletedJob();
  job["status"] = "running";
  job["finished_at"] = nullptr;
  job["finished_at_ms"] = nullptr;
  job["monitoring_session"] = "mon-4";
  job["metrics"] = json::object();
  auto now =
      std::chrono::system_clock::time_point(std::chrono::milliseconds(1795326775624 + 3600000));
  std::string out = RenderJob(job, now);
  EXPECT_NE(out.find("running for 1h00m"), std::string::npos) << out;
  EXPECT_NE(out.find("session mon-4 open on the node"), std::string::npos);
  job["monitoring_session"] = nullptr;
  job["metrics"] = {{"gpu_monitoring_error", "cannot reach the node manager at http://n:1"}};
  out = RenderJob(job, now);
  EXPECT_NE(out.find("monitoring:  failed: cannot reach the node manager"), std::string::npos);
  EXPECT_EQ(out.find("metrics:"), std::string::npos);  // the error is not a metric
}

TEST(ClusterRenderTest, SubmissionQueueEventsAndOutcomes) {
  json submitted = json::parse(R"({"submission": "sub-1", "task_name": "t",
    "model_source": "catalog: Llama-3.1-8B", "jobs": [{"id": "job-a", "experiment": 0,
    "parameters": {"tp": 2}, "gpus": 2, "min_free_memory_mb": 25578.0, "status": "queued"}]})");
  std::string out = RenderSubmission(submitted);
  EXPECT_NE(out.find("submitted t (catalog: Llama-3.1-8B) as sub-1: 1 job(s)"), std::string::npos);
  EXPECT_NE(LineWith(out, "job-a").find("25578 MiB"), std::string::npos);
  EXPECT_NE(LineWith(out, "job-a").find("tp=2"), std::string::npos);

  json queue = json::parse(R"({"queue": [{"position": 1, "job_id": "job-a", "task_name": "t",
    "experiment": 0, "owner": "alice", "priority": 5, "requirement": {"gpus": 4,
    "min_free_memory_mb": 25579.0}, "waiting_seconds": 65, "timeout_in_seconds": 235,
    "reason": "no 4 GPU(s) on one node meet the request; node-a: 3 available, 5 leased"}]})");
  std::string row = LineWith(RenderQueue(queue), "job-a");
  for (const char* want : {"t #0", "alice", " 5 ", " 4 ", "25579 MiB", "1m05s", "in 3m55s",
                           "node-a: 3 available, 5 leased"}) {
    EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  }
  EXPECT_EQ(RenderQueue({{"queue", json::array()}}), "The queue is empty.\n");

  json events = json::parse(R"({"events": [{"id": 9, "kind": "job.completed",
    "at": "2026-11-22T05:53:11.267Z", "message": "job job-a completed: fine"}]})");
  std::string e = LineWith(RenderEvents(events), "job.completed");
  EXPECT_NE(e.find("2026-11-22T05:53:11.267Z"), std::string::npos);
  EXPECT_NE(e.find("job job-a completed: fine"), std::string::npos);

  json running = CompletedJob();
  running["status"] = "running";
  running["message"] = "running on node-a";
  EXPECT_EQ(RenderJobOutcome(running),
            "job-59bfe518acd6   running    llama-3.1-8b-throughput #0: running on node-a [GPUs 1 "
            "(H100)]\n");
}

TEST(ClusterRenderTest, ANodeShowsItsLastSnapshotInTheGpusTable) {
  json node = json::parse(R"({"name": "node-a", "state": "reachable",
    "last_heartbeat": "2026-11-22T06:01:19.451Z", "version": "0.1.0", "api_url": "http://n:1",
    "labels": {}, "snapshot": {"source": "nvml", "gpus": [{"index": 0, "uuid": "GPU-1",
    "name": "NVIDIA H100 80GB HBM3", "temperature_c": 31, "processes": []}]}})");
  std::string out = RenderNode(node);
  EXPECT_EQ(out.rfind("node node-a: reachable, last heartbeat 2026-11-22T06:01:19.451Z", 0), 0u)
      << out;
  EXPECT_NE(LineWith(out, "  0  NVIDIA H100").find("31°C"), std::string::npos);
  node.erase("snapshot");
  EXPECT_NE(RenderNode(node).find("No readable GPU snapshot"), std::string::npos);
}

// examples/tasks/llama-3.1-8b-vllm.json on the default H100 (81,559 MiB): every experiment runs;
// max-num-seqs=128 is capped where the KV cache holds fewer 8192-token sequences.
TEST(EstimateRenderTest, EachExperimentShowsItsNeedCapacityConcurrencyAndVerdict) {
  const nlohmann::json task = {
      {"task_name", "llama-3.1-8b-throughput"},
      {"model", {{"id_or_path", "meta-llama/Llama-3.1-8B-Instruct"}}},
      {"base_runtime", "vllm"},
      {"parameters", {{"max-model-len", {8192}}, {"max-num-seqs", {32, 128}}}},
      {"parallel_config", {{"tp", {1, 2}}}}};
  auto estimate = sched::EstimateTask(task);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  const std::string out = RenderEstimate(*estimate);
  EXPECT_NE(out.find("4 experiment(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("KV TOKENS"), std::string::npos) << out;
  EXPECT_NE(out.find("on a 81559 MiB GPU"), std::string::npos) << out;
  // tp=1: weights 15,316 + KV for one 8192-token sequence 1,024 + reserve 1,536 in 90% of the GPU
  // → a 19,862 MiB GPU at least; 0.9 × 81,559 − 15,316 − 1,536 = 56,551 MiB of KV = 452,408
  // tokens of 128 KiB = 55 sequences.
  const std::string tp1_32 = LineWith(out, "max-num-seqs=32 tp=1");
  EXPECT_NE(
      tp1_32.find("15316 MiB    1024 MiB   1536 MiB    0.9   19862 MiB      452408        55"),
      std::string::npos)
      << out;
  EXPECT_NE(tp1_32.find("fits"), std::string::npos) << tp1_32;
  EXPECT_NE(LineWith(out, "max-num-seqs=128 tp=1").find("will run, concurrency capped at 55"),
            std::string::npos)
      << out;
  // tp=2: half the weights and KV per GPU; 125 sequences at once.
  const std::string tp2_128 = LineWith(out, "max-num-seqs=128 tp=2");
  EXPECT_NE(tp2_128.find("will run, concurrency capped at 125"), std::string::npos) << out;
  EXPECT_EQ(out.find("cannot run"), std::string::npos) << out;
}

TEST(EstimateRenderTest, AnExperimentThatCannotHoldOneSequenceSaysWhy) {
  sched::EstimateOptions options;
  options.gpu_memory_mib = 24 * 1024;
  auto estimate = sched::EstimateTask(
      {{"model", {{"id_or_path", "Llama-3.1-8B"}}}, {"parameters", {{"max-model-len", 131072}}}},
      options);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  const std::string out = RenderEstimate(*estimate);
  EXPECT_NE(out.find("cannot run: 90% of a 24576 MiB GPU leaves KV cache for 42131 tokens, less "
                     "than one 131072-token sequence"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("16384 MiB"), std::string::npos) << out;  // KV for the one sequence
}

TEST(EstimateRenderTest, AGivenMemoryHasNoCapacity) {
  auto estimate = sched::EstimateTask(
      {{"model", {{"id_or_path", "acme/secret-13b"}}}, {"min_free_memory_mb", 30000}});
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  const std::string out = RenderEstimate(*estimate);
  EXPECT_NE(out.find("30000 MiB*"), std::string::npos) << out;
  EXPECT_NE(out.find("* min_free_memory_mb from the task"), std::string::npos) << out;
  EXPECT_EQ(out.find("KV TOKENS, MAX SEQS:"), std::string::npos) << out;
}

// The CUDA tracer's figures as GET /api/v1/processes and /api/v1/processes/{pid}/cuda send them.
nlohmann::json CudaEntry() {
  return nlohmann::json::parse(R"json({
    "pid": 41000, "gpu": 0, "gpu_uuid": "GPU-0", "name": "train", "source": "nvml",
    "cuda": {"pid": 41000, "comm": "train", "gpu_uuid": "GPU-0", "device": 0, "remote": false,
             "launches": 1200, "launches_per_second": 120.5, "busy_seconds": 3.25,
             "core_usage": 512, "syncs": 7, "device_memory_bytes": 1048576,
             "device_memory_peak_bytes": 4194304, "exited": false, "leaked_bytes": 0,
             "copies": {"host_to_device": 1000, "device_to_host": 2048, "device_to_device": 0},
             "top_kernel": "void axpy<float>(float, float const*, float*)"}})json");
}

TEST(RenderTest, CudaProcessesOneLineEachWithTheirColumns) {
  nlohmann::json leak = CudaEntry();
  leak["pid"] = 43000;
  leak["gpu"] = nullptr;
  leak["name"] = "leaky";
  leak["cuda"]["exited"] = true;
  leak["cuda"]["remote"] = true;
  leak["cuda"]["leaked_bytes"] = 8192;
  leak["cuda"]["top_kernel"] = nullptr;
  nlohmann::json untraced = {{"pid", 5}, {"gpu", 0}, {"cuda", nullptr}};
  const std::string out =
      RenderCudaProcesses(nlohmann::json::array({CudaEntry(), leak, untraced}), false);
  EXPECT_EQ(out,
            "    PID     GPU  COMMAND           LAUNCHES     L/S       MEM NOW / PEAK     LEAKED  "
            "      H2D       D2H       D2D    BUSY s  TOP KERNEL\n"
            "  41000       0  train                 1200     120    1.0 MiB / 4.0 MiB          -  "
            "   1000 B   2.0 KiB       0 B      3.25  void axpy<float>(float, float const*, float*)\n"
            "  43000  remote  leaky                 1200     120     exited / 4.0 MiB    8.0 KiB  "
            "   1000 B   2.0 KiB       0 B      3.25  -\n")
      << out;
  EXPECT_EQ(RenderCudaProcesses(nlohmann::json::array(), false).substr(0, 7), "    PID");
  EXPECT_NE(RenderCudaProcesses(nlohmann::json::array(), false).find("No traced CUDA processes."),
            std::string::npos);
  nlohmann::json on_node = CudaEntry();
  on_node["node"] = "gpu-a7";
  on_node["cuda"].erase("copies");
  const std::string cluster = RenderCudaProcesses(nlohmann::json::array({on_node}), true);
  EXPECT_EQ(cluster.rfind("NODE", 0), 0u) << cluster;
  EXPECT_NE(cluster.find("gpu-a7             41000"), std::string::npos) << cluster;
  EXPECT_NE(cluster.find("        -         -         -"), std::string::npos) << cluster;
}

TEST(RenderTest, CudaDetailKernelsShapesStreamsFailures) {
  nlohmann::json c = CudaEntry()["cuda"];
  c["library"] = "/usr/local/cuda/lib64/libcudart.so.13";
  c["top_kernels"] = nlohmann::json::parse(R"json([
    {"name": "void axpy<float>(float, float const*, float*)", "launches": 1000, "other_shapes": 2,
     "shapes": [{"grid": [256, 1, 1], "block": [128, 1, 1], "shared_bytes": 0, "launches": 998}]},
    {"name": "other", "launches": 200, "shapes": [], "other_shapes": 0}])json");
  c["streams"] = nlohmann::json::parse(R"json([
    {"handle": 0, "non_blocking": false, "per_thread": false, "thread": 0, "launches": 10,
     "syncs": 2, "busy_seconds": 0.5, "copies": {"host_to_device": 4096}},
    {"handle": 4660, "non_blocking": true, "per_thread": false, "thread": 0, "launches": 1190,
     "syncs": 5, "busy_seconds": 2.75, "copies": {}}])json");
  c["failures"] = {{"cudaErrorMemoryAllocation", 3}};
  c["exited"] = true;
  c["exit_code"] = 1;
  c["leaked_bytes"] = 8192;
  c["leaked_allocations"] = 2;
  const std::string out = RenderCudaDetail({{"pid", 41000}, {"processes", {c}}});
  for (const char* want : {
           "pid 41000 (train) on GPU-0 (CUDA device 0)\n",
           "  library      /usr/local/cuda/lib64/libcudart.so.13\n",
           "  launches     1200 (120/s), syncs 7, busy 3.25 s (enqueue→sync spans), core usage 512.0\n",
           "device 1.0 MiB now, 4.0 MiB peak",
           "  copies       H2D 1000 B, D2H 2.0 KiB, D2D 0 B",
           "  exited       with code 1: leaked 8.0 KiB in 2 allocation(s)",
           "        1000  void axpy<float>(float, float const*, float*)\n",
           "         998    grid 256x1x1 block 128x1x1 shared 0 B\n",
           "           2    other shapes\n",
           "         200  other\n",
           "  0x0                legacy               10       2     0.50    4.0 KiB         -         -\n",
           "  0x1234             non-blocking       1190       5     2.75          -         -         -\n",
           "           3  cudaErrorMemoryAllocation\n"}) {
    EXPECT_NE(out.find(want), std::string::npos) << "missing: " << want << "\n" << out;
  }
  EXPECT_EQ(RenderCudaDetail({{"processes", nlohmann::json::array()}}), "No traced CUDA process.\n");
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(5.0 * (1ull << 30)), "5.0 GiB");
}

}  // namespace
}  // namespace flyt::ctl
