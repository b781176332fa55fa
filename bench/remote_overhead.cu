// Remote CUDA overhead (issue 6): what an unmodified CUDA program pays per runtime call when flyt's
// libcudart.so.13 forwards it to flyt-gpu-server. An ordinary `nvcc -cudart=shared` program that
// uses only the CUDA runtime API, so the same binary runs on NVIDIA's runtime (a local GPU) and on
// flyt's (LD_LIBRARY_PATH=<build>/lib/flyt FLYT_SERVER=unix:PATH or HOST:PORT).
//
//   flyt-bench-remote-overhead [--iterations N] [--repeats R] [--warmup W]
//       [--copy-mib M] [--copy-repeats C] [--json]
//
// Cases, each timed with std::chrono::steady_clock around the whole loop:
//   get_device_count   N × cudaGetDeviceCount; ns per call.
//   mem_get_info       N × cudaMemGetInfo (a synchronous call the runtime cannot answer from a
//                      cache: free memory changes); ns per call.
//   malloc_free        N × (cudaMalloc of 1 MiB + cudaFree); ns per pair.
//   launch_empty       N × empty<<<1,1>>>(), then one cudaDeviceSynchronize (inside the timed
//                      region); ns per launch, and ("issue") ns per launch until the last launch
//                      returned, before the synchronise.
//   launch_7_params    the same with a kernel of 7 mixed parameters (3 pointers, int, float,
//                      double, long long: 48 bytes of parameter buffer); ns per launch.
//   memcpy_h2d/d2h     C × cudaMemcpy of M MiB (pageable host memory); MiB/s.
// Every case runs W untimed iterations first (one copy for the copy cases), then R repeats; the
// median repeat is reported with its min and max. Every call's result is checked: the first error
// ends the run with the call's name and the error's name and number, so a missing or broken call
// in a runtime shows up as exactly that.
#include <cuda_runtime.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Options {
  long iterations = 100000;
  int repeats = 5;
  long warmup = 1000;
  size_t copy_mib = 64;
  int copy_repeats = 10;
  bool json = false;
};

// One case's figures: ns per call (latency cases) or MiB/s (copy cases), one value per repeat.
struct Row {
  std::string name;
  std::string unit;  // "ns" or "MiB/s"
  long calls_per_repeat = 0;
  std::vector<double> values;
  // Launch cases: ns per launch until the last launch returned, before the closing
  // cudaDeviceSynchronize (the program's own cost of issuing; `values` is end to end).
  std::vector<double> issue_values;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double Min(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}
double Max(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Ends the run on a failed call: which call, which error. The error's name comes from the runtime
// under test; if that runtime cannot name it, the number still says it.
void Check(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return;
  const char* name = cudaGetErrorName(code);
  const char* text = cudaGetErrorString(code);
  std::fprintf(stderr, "flyt-bench-remote-overhead: %s failed: %s (%d): %s\n", call,
               name != nullptr ? name : "?", static_cast<int>(code), text != nullptr ? text : "");
  std::exit(1);
}

// After a batch of launches: the launch errors the runtime kept (<<<>>> itself returns nothing).
void CheckLaunches(const char* kernel) {
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) {
    const std::string call = std::string(kernel) + "<<<1,1>>> (cudaGetLastError)";
    Check(code, call.c_str());
  }
}

__global__ void Empty() {}

// Seven parameters of mixed kinds. The body never stores (n is never equal to a thread index when
// n < 0), but it reads every parameter so none can be dropped from the parameter buffer.
__global__ void SevenParams(float* out, const float* in, int n, float alpha, double beta,
                            long long stride, int* flag) {
  if (static_cast<int>(threadIdx.x) == n) {
    out[0] = in[stride] * alpha + static_cast<float>(beta);
    flag[0] = 1;
  }
}

// A timed loop body: runs `count` iterations. A launch loop sets `*issued` when its last launch
// has returned, before it synchronises.
using LoopBody = std::function<void(long count, SteadyClock::time_point* issued)>;

// Runs `body` once with `warmup`, then `repeats` times with `iterations`; ns per iteration.
Row TimeLoop(const Options& opt, const char* name, const LoopBody& body) {
  SteadyClock::time_point issued{};
  if (opt.warmup > 0) body(opt.warmup, &issued);
  Row row{name, "ns", opt.iterations, {}, {}};
  for (int r = 0; r < opt.repeats; ++r) {
    issued = {};
    const auto start = SteadyClock::now();
    body(opt.iterations, &issued);
    const auto end = SteadyClock::now();
    const double n = static_cast<double>(opt.iterations);
    row.values.push_back(std::chrono::duration<double, std::nano>(end - start).count() / n);
    if (issued != SteadyClock::time_point{}) {
      row.issue_values.push_back(std::chrono::duration<double, std::nano>(issued - start).count() /
                                 n);
    }
  }
  return row;
}

std::vector<Row> RunAll(const Options& opt) {
  std::vector<Row> rows;

  rows.push_back(TimeLoop(opt, "get_device_count", [](long n, SteadyClock::time_point*) {
    for (long i = 0; i < n; ++i) {
      int count = 0;
      Check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
      if (count < 1) {
        std::fprintf(stderr, "flyt-bench-remote-overhead: cudaGetDeviceCount says %d devices\n",
                     count);
        std::exit(1);
      }
    }
  }));

  rows.push_back(TimeLoop(opt, "mem_get_info", [](long n, SteadyClock::time_point*) {
    for (long i = 0; i < n; ++i) {
      size_t free_bytes = 0;
      size_t total_bytes = 0;
      Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    }
  }));

  rows.push_back(TimeLoop(opt, "malloc_free", [](long n, SteadyClock::time_point*) {
    for (long i = 0; i < n; ++i) {
      void* p = nullptr;
      Check(cudaMalloc(&p, size_t{1} << 20), "cudaMalloc(1 MiB)");
      Check(cudaFree(p), "cudaFree");
    }
  }));

  rows.push_back(TimeLoop(opt, "launch_empty", [](long n, SteadyClock::time_point* issued) {
    for (long i = 0; i < n; ++i) Empty<<<1, 1>>>();
    *issued = SteadyClock::now();
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after empty launches)");
    CheckLaunches("Empty");
  }));

  {
    float* out = nullptr;
    float* in = nullptr;
    int* flag = nullptr;
    Check(cudaMalloc(&out, 4096), "cudaMalloc(4 KiB)");
    Check(cudaMalloc(&in, 4096), "cudaMalloc(4 KiB)");
    Check(cudaMalloc(&flag, 4096), "cudaMalloc(4 KiB)");
    rows.push_back(TimeLoop(opt, "launch_7_params", [&](long n, SteadyClock::time_point* issued) {
      for (long i = 0; i < n; ++i) {
        SevenParams<<<1, 1>>>(out, in, -1, 1.5f, 2.25, static_cast<long long>(i & 7), flag);
      }
      *issued = SteadyClock::now();
      Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after 7-parameter launches)");
      CheckLaunches("SevenParams");
    }));
    Check(cudaFree(out), "cudaFree");
    Check(cudaFree(in), "cudaFree");
    Check(cudaFree(flag), "cudaFree");
  }

  // Copies: pageable host memory, as an unmodified program would most often have it.
  const size_t bytes = opt.copy_mib << 20;
  std::vector<unsigned char> host_out(bytes);
  std::vector<unsigned char> host_in(bytes);
  for (size_t i = 0; i < bytes; ++i) host_out[i] = static_cast<unsigned char>(i * 131 + 7);
  void* device = nullptr;
  Check(cudaMalloc(&device, bytes), "cudaMalloc(copy buffer)");
  // Warm-up, and a check that the bytes make the round trip intact (a benchmark of a copy that
  // loses data would be worthless).
  Check(cudaMemcpy(device, host_out.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  Check(cudaMemcpy(host_in.data(), device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  if (std::memcmp(host_in.data(), host_out.data(), bytes) != 0) {
    std::fprintf(stderr, "flyt-bench-remote-overhead: %zu MiB came back from the device changed\n",
                 opt.copy_mib);
    std::exit(1);
  }
  for (const bool h2d : {true, false}) {
    Row row{h2d ? "memcpy_h2d" : "memcpy_d2h", "MiB/s", opt.copy_repeats, {}, {}};
    for (int r = 0; r < opt.repeats; ++r) {
      const auto start = SteadyClock::now();
      for (int i = 0; i < opt.copy_repeats; ++i) {
        if (h2d) {
          Check(cudaMemcpy(device, host_out.data(), bytes, cudaMemcpyHostToDevice),
                "cudaMemcpy H2D");
        } else {
          Check(cudaMemcpy(host_in.data(), device, bytes, cudaMemcpyDeviceToHost),
                "cudaMemcpy D2H");
        }
      }
      const std::chrono::duration<double> elapsed = SteadyClock::now() - start;
      row.values.push_back(static_cast<double>(opt.copy_mib) * opt.copy_repeats / elapsed.count());
    }
    rows.push_back(std::move(row));
  }
  Check(cudaFree(device), "cudaFree(copy buffer)");
  return rows;
}

// Where the program ran: the runtime's and driver's versions and device 0's name.
struct Environment {
  int runtime_version = 0;
  int driver_version = 0;
  int device_count = 0;
  std::string device_name;
};

Environment Describe() {
  Environment env;
  Check(cudaGetDeviceCount(&env.device_count), "cudaGetDeviceCount");
  // Version queries and the properties are informational: a runtime without them still gets timed.
  if (cudaRuntimeGetVersion(&env.runtime_version) != cudaSuccess) env.runtime_version = -1;
  if (cudaDriverGetVersion(&env.driver_version) != cudaSuccess) env.driver_version = -1;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    env.device_name = prop.name;
  } else {
    env.device_name = "?";
  }
  cudaGetLastError();  // forget a failed informational query
  return env;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void PrintJson(const Options& opt, const Environment& env, const std::vector<Row>& rows) {
  utsname uts{};
  ::uname(&uts);
  const char* server = std::getenv("FLYT_SERVER");
  std::printf("{\n  \"benchmark\": \"remote_overhead\",\n");
  std::printf("  \"host\": %s,\n  \"kernel\": %s,\n  \"cpus\": %ld,\n",
              JsonString(uts.nodename).c_str(), JsonString(uts.release).c_str(),
              ::sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("  \"flyt_server\": %s,\n", server != nullptr ? JsonString(server).c_str() : "null");
  std::printf("  \"runtime_version\": %d,\n  \"driver_version\": %d,\n", env.runtime_version,
              env.driver_version);
  std::printf("  \"device_count\": %d,\n  \"device_name\": %s,\n", env.device_count,
              JsonString(env.device_name).c_str());
  std::printf("  \"iterations\": %ld,\n  \"repeats\": %d,\n  \"warmup\": %ld,\n", opt.iterations,
              opt.repeats, opt.warmup);
  std::printf("  \"copy_mib\": %zu,\n  \"copy_repeats\": %d,\n  \"results\": [\n", opt.copy_mib,
              opt.copy_repeats);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const bool ns = row.unit == "ns";
    const char* key = ns ? "ns" : "mib_per_s";
    std::printf("    {\"case\": %s, \"unit\": %s, \"calls_per_repeat\": %ld, ",
                JsonString(row.name).c_str(), JsonString(row.unit).c_str(), row.calls_per_repeat);
    std::printf("\"median_%s\": %.1f, \"min_%s\": %.1f, \"max_%s\": %.1f, ", key,
                Median(row.values), key, Min(row.values), key, Max(row.values));
    if (ns) std::printf("\"calls_per_s\": %.0f, ", 1e9 / Median(row.values));
    if (!row.issue_values.empty()) {
      std::printf("\"median_issue_ns\": %.1f, ", Median(row.issue_values));
    }
    std::printf("\"per_repeat\": [");
    for (size_t j = 0; j < row.values.size(); ++j) {
      std::printf("%s%.1f", j == 0 ? "" : ", ", row.values[j]);
    }
    std::printf("]}%s\n", i + 1 == rows.size() ? "" : ",");
  }
  std::printf("  ]\n}\n");
}

void PrintTable(const Options& opt, const Environment& env, const std::vector<Row>& rows) {
  const char* server = std::getenv("FLYT_SERVER");
  std::printf("Remote CUDA overhead: device 0 \"%s\" (%d device(s)), runtime %d, FLYT_SERVER=%s\n",
              env.device_name.c_str(), env.device_count, env.runtime_version,
              server != nullptr ? server : "(unset)");
  std::printf("%ld calls x %d repeats (+%ld warm-up); copies %zu MiB x %d; median of repeats\n\n",
              opt.iterations, opt.repeats, opt.warmup, opt.copy_mib, opt.copy_repeats);
  std::printf("| case | unit | median | min | max | calls/s | issue ns |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    const double median = Median(row.values);
    if (row.unit == "ns") {
      std::string issue;
      if (!row.issue_values.empty()) issue = std::to_string(std::lround(Median(row.issue_values)));
      std::printf("| %s | ns/call | %.0f | %.0f | %.0f | %.0f | %s |\n", row.name.c_str(), median,
                  Min(row.values), Max(row.values), 1e9 / median, issue.c_str());
    } else {
      std::printf("| %s | MiB/s | %.0f | %.0f | %.0f | | |\n", row.name.c_str(), median,
                  Min(row.values), Max(row.values));
    }
  }
}

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--iterations N] [--repeats R] [--warmup W] [--copy-mib M]\n"
               "          [--copy-repeats C] [--json]\n",
               argv0);
}

// Parses a positive (or, with allow_zero, non-negative) integer flag value; false on bad input.
bool ParseCount(const char* text, bool allow_zero, long* out) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < (allow_zero ? 0 : 1)) return false;
  *out = value;
  return true;
}

bool ParseArgs(int argc, char** argv, Options* opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      opt->json = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") return false;
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", arg.c_str());
      return false;
    }
    long value = 0;
    const bool is_warmup = arg == "--warmup";
    if (!ParseCount(argv[++i], is_warmup, &value)) {
      std::fprintf(stderr, "%s: not a %s number: %s\n", arg.c_str(),
                   is_warmup ? "non-negative" : "positive", argv[i]);
      return false;
    }
    if (arg == "--iterations" || arg == "-n") {
      opt->iterations = value;
    } else if (arg == "--repeats" || arg == "-r") {
      opt->repeats = static_cast<int>(value);
    } else if (is_warmup) {
      opt->warmup = value;
    } else if (arg == "--copy-mib") {
      opt->copy_mib = static_cast<size_t>(value);
    } else if (arg == "--copy-repeats") {
      opt->copy_repeats = static_cast<int>(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!ParseArgs(argc, argv, &opt)) {
    Usage(argv[0]);
    return 2;
  }
  const Environment env = Describe();
  const std::vector<Row> rows = RunAll(opt);
  if (opt.json) {
    PrintJson(opt, env, rows);
  } else {
    PrintTable(opt, env, rows);
  }
  return 0;
}
