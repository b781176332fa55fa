// Monitoring-core benchmark: what one snapshot and 1 Hz sampling cost, read through flyt's NVML
// binding (on the simulated NVML library) versus spawning a program per snapshot the way the LLM
// autotuner's monitor ran nvidia-smi. Prints a Markdown table for docs/benchmarks.md.
//
//   build/bin/flyt-bench-monitor [--seconds N] [--rounds R]
//
// Every mode runs in its own child process (this program re-executes itself), so peak RSS is per
// mode. CPU time includes child processes (getrusage RUSAGE_CHILDREN): for the spawn path most of
// the cost is in the children. The node has 8 GPUs and 200 processes whose PIDs are real (200
// `sleep` children), so /proc is read for each of them as in production.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/subprocess.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "gpu/smi_backend.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Usage {
  double self_cpu_s = 0;
  double child_cpu_s = 0;
  long max_rss_kb = 0;
};

double Seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; }

Usage Now() {
  rusage self{}, kids{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  return {Seconds(self.ru_utime) + Seconds(self.ru_stime),
          Seconds(kids.ru_utime) + Seconds(kids.ru_stime), self.ru_maxrss};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string Self() { return fs::read_symlink("/proc/self/exe").string(); }
std::string BuildDir() { return fs::path(Self()).parent_path().parent_path().string(); }

// Writes a scenario: 8 H100s, 25 processes each with the given (real) PIDs.
std::string WriteScenario(const fs::path& dir, const std::vector<pid_t>& pids) {
  std::ofstream out(dir / "bench.toml");
  out << "[scenario]\nname = \"bench-h100x8-200procs\"\n"
         "[[gpu]]\ncount = 8\nname = \"NVIDIA H100 80GB HBM3\"\nmemory_total_mib = 81559\n"
         "memory_reserved_mib = 529\npower_limit_w = 700\nmax_sm_clock_mhz = 1980\n"
         "max_mem_clock_mhz = 2619\n"
         "utilization = { kind = \"sine\", mean = 60, amplitude = 35, period_s = 120 }\n";
  for (size_t i = 0; i < pids.size(); ++i) {
    out << "[[process]]\ngpu = " << i % 8 << "\npid = " << pids[i] << "\nmemory_mib = 2048\n";
  }
  return (dir / "bench.toml").string();
}

// The same node as nvidia-smi would print it, from one NVML snapshot.
void WriteCsv(const fs::path& dir, const flyt::gpu::GpuSnapshot& snap) {
  std::ofstream gpus(dir / "gpus.csv");
  std::ofstream apps(dir / "apps.csv");
  auto mib = [](std::optional<uint64_t> b) { return b ? std::to_string(*b >> 20) : "[N/A]"; };
  for (const auto& g : snap.gpus) {
    gpus << g.index << ", " << g.uuid << ", " << g.name << ", " << g.pci_bus_id << ", "
         << g.serial.value_or("[N/A]") << ", " << mib(g.memory_total_bytes) << ", "
         << mib(g.memory_used_bytes) << ", " << mib(g.memory_free_bytes) << ", "
         << mib(g.memory_reserved_bytes) << ", " << g.gpu_util_percent.value_or(0) << ", "
         << g.memory_util_percent.value_or(0) << ", " << g.temperature_c.value_or(0) << ", "
         << g.power_draw_mw.value_or(0) / 1000.0 << ", " << g.power_limit_mw.value_or(0) / 1000.0
         << ", " << g.sm_clock_mhz.value_or(0) << ", " << g.memory_clock_mhz.value_or(0) << ", "
         << g.max_sm_clock_mhz.value_or(0) << ", " << g.max_memory_clock_mhz.value_or(0)
         << ", [N/A], P0, Default, 0, 0, 0, 0, 580.65.06\n";
    for (const auto& p : g.processes) {
      apps << g.uuid << ", " << p.pid << ", /usr/bin/python3, " << mib(p.used_memory_bytes) << "\n";
    }
  }
}

struct Node {
  fs::path dir;
  std::vector<pid_t> children;
  ~Node() {
    for (pid_t p : children) kill(p, SIGKILL);
    for (pid_t p : children) waitpid(p, nullptr, 0);
    fs::remove_all(dir);
  }
};

// Sets up the simulated node (and its 200 real processes); returns the NVML backend.
std::unique_ptr<flyt::gpu::Backend> SetUp(Node& node) {
  node.dir = fs::temp_directory_path() / ("flyt-bench-" + std::to_string(getpid()));
  fs::create_directories(node.dir);
  for (int i = 0; i < 200; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execlp("sleep", "sleep", "3600", static_cast<char*>(nullptr));
      _exit(127);
    }
    node.children.push_back(pid);
  }
  std::string scenario = WriteScenario(node.dir, node.children);
  setenv("FLYT_SIM_SCENARIO", scenario.c_str(), 1);
  // Snapshot rounds: 1000× speed so that every snapshot sees new per-process samples (the
  // costlier path). The 1 Hz loops run at real speed, as a node does.
  setenv("FLYT_SIM_SPEED",
         std::getenv("FLYT_BENCH_SPEED") ? std::getenv("FLYT_BENCH_SPEED") : "1000", 1);
  auto backend = flyt::gpu::OpenNvmlBackend({BuildDir() + "/lib/libflyt-sim-nvml.so", "/proc"});
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    std::exit(1);
  }
  auto snap = (*backend)->Snapshot();
  if (!snap.ok() || snap->gpus.size() != 8) std::exit(1);
  size_t procs = 0;
  for (const auto& g : snap->gpus) procs += g.processes.size();
  if (procs != 200) {
    std::fprintf(stderr, "expected 200 processes, saw %zu\n", procs);
    std::exit(1);
  }
  WriteCsv(node.dir, *snap);
  setenv("FLYT_BENCH_CSV_DIR", node.dir.c_str(), 1);
  return std::move(backend).value();
}

std::unique_ptr<flyt::gpu::Backend> SpawnBackend() {
  flyt::gpu::SmiOptions options;
  options.program = BuildDir() + "/bin/flyt-bench-print-csv";
  return flyt::gpu::MakeSmiBackend(options);
}

// Mode: N snapshots per round; prints "cpu_us wall_us" per round.
int RunSnapshots(bool spawn, int rounds, int per_round) {
  Node node;
  auto nvml = SetUp(node);
  auto backend = spawn ? SpawnBackend() : std::move(nvml);
  for (int w = 0; w < 20; ++w) (void)backend->Snapshot();  // warm up
  for (int r = 0; r < rounds; ++r) {
    Usage u0 = Now();
    auto t0 = Clock::now();
    for (int i = 0; i < per_round; ++i) {
      auto snap = backend->Snapshot();
      if (!snap.ok() || snap->gpus.size() != 8) {
        std::fprintf(stderr, "snapshot failed: %s\n", snap.status().ToString().c_str());
        return 1;
      }
    }
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    Usage u1 = Now();
    double cpu = (u1.self_cpu_s - u0.self_cpu_s) + (u1.child_cpu_s - u0.child_cpu_s);
    std::printf("%.3f %.3f\n", cpu / per_round * 1e6, wall / per_round * 1e6);
  }
  return 0;
}

// Mode: sample at 1 Hz for `seconds`; prints "cpu_percent_of_one_core max_rss_kb".
int RunLoop(bool spawn, int seconds) {
  setenv("FLYT_BENCH_SPEED", "1", 1);
  Node node;
  auto nvml = SetUp(node);
  auto backend = spawn ? SpawnBackend() : std::move(nvml);
  flyt::gpu::MonitorOptions options;
  options.sample_interval = std::chrono::seconds(1);
  flyt::gpu::Monitor monitor(std::move(backend), flyt::SystemClock::Instance(), options);
  auto session = monitor.StartSession();
  Usage u0 = Now();
  auto t0 = Clock::now();
  monitor.Start();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  monitor.Stop();
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  Usage u1 = Now();
  double cpu = (u1.self_cpu_s - u0.self_cpu_s) + (u1.child_cpu_s - u0.child_cpu_s);
  auto stats = monitor.StopSession(*session);
  std::printf("%.4f %ld %llu\n", 100.0 * cpu / wall, u1.max_rss_kb,
              static_cast<unsigned long long>(stats.ok() ? stats->sample_count : 0));
  return 0;
}

std::vector<std::vector<double>> RunChild(const std::vector<std::string>& args) {
  std::string cmd = Self();
  for (const auto& a : args) cmd += " " + a;
  FILE* p = popen(cmd.c_str(), "r");
  std::vector<std::vector<double>> rows;
  char line[256];
  while (p != nullptr && std::fgets(line, sizeof(line), p) != nullptr) {
    std::vector<double> row;
    char* s = line;
    char* end = nullptr;
    for (double v = std::strtod(s, &end); end != s; v = std::strtod(s, &end)) {
      row.push_back(v);
      s = end;
    }
    if (!row.empty()) rows.push_back(row);
  }
  if (p == nullptr || pclose(p) != 0) {
    std::fprintf(stderr, "child %s failed\n", cmd.c_str());
    std::exit(1);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  int seconds = 60, rounds = 7, per_round = 500;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc)
      mode = argv[++i];
    else if (a == "--seconds" && i + 1 < argc)
      seconds = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (a == "--per-round" && i + 1 < argc)
      per_round = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--seconds N] [--rounds R] [--per-round N]\n", argv[0]);
      return 2;
    }
  }
  if (mode == "snapshot-nvml") return RunSnapshots(false, rounds, per_round);
  if (mode == "snapshot-spawn") return RunSnapshots(true, rounds, per_round / 5);
  if (mode == "loop-nvml") return RunLoop(false, seconds);
  if (mode == "loop-spawn") return RunLoop(true, seconds);

  auto r = std::to_string(rounds), n = std::to_string(per_round), s = std::to_string(seconds);
  auto snap_nvml = RunChild({"--mode", "snapshot-nvml", "--rounds", r, "--per-round", n});
  auto snap_spawn = RunChild({"--mode", "snapshot-spawn", "--rounds", r, "--per-round", n});
  auto loop_nvml = RunChild({"--mode", "loop-nvml", "--seconds", s});
  auto loop_spawn = RunChild({"--mode", "loop-spawn", "--seconds", s});
  auto col = [](const std::vector<std::vector<double>>& rows, size_t c) {
    std::vector<double> v;
    for (const auto& row : rows) v.push_back(row[c]);
    return Median(v);
  };
  double nvml_cpu = col(snap_nvml, 0), spawn_cpu = col(snap_spawn, 0);
  double nvml_wall = col(snap_nvml, 1), spawn_wall = col(snap_spawn, 1);
  std::printf("One snapshot of 8 GPUs with 200 processes (median of %d rounds):\n\n", rounds);
  std::printf("| path | CPU per snapshot (incl. children) | wall per snapshot |\n|---|---|---|\n");
  std::printf("| NVML binding (simulated NVML) | %.1f µs | %.1f µs |\n", nvml_cpu, nvml_wall);
  std::printf("| spawn a CSV-printing program per snapshot (2 execs) | %.1f µs | %.1f µs |\n",
              spawn_cpu, spawn_wall);
  std::printf("| ratio spawn / NVML | %.1f× | %.1f× |\n\n", spawn_cpu / nvml_cpu,
              spawn_wall / nvml_wall);
  std::printf("Sampling at 1 Hz for %d s (Monitor thread, one session open):\n\n", seconds);
  std::printf("| path | CPU, %% of one core | peak RSS | samples |\n|---|---|---|---|\n");
  std::printf("| NVML binding | %.3f %% | %.1f MiB | %.0f |\n", loop_nvml[0][0],
              loop_nvml[0][1] / 1024, loop_nvml[0][2]);
  std::printf("| spawn per sample | %.3f %% | %.1f MiB | %.0f |\n", loop_spawn[0][0],
              loop_spawn[0][1] / 1024, loop_spawn[0][2]);
  return 0;
}
