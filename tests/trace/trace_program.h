// Shared by the CUDA tracer's test programs (tests/trace/*.cu): each program makes an exactly known
// set of CUDA calls, and the figures the tracer must report for it are written in
// tests/trace/expectations.py. This header holds what they share:
//
//   --calls FILE     append one line per CUDA call made: "<api name> <error name>" (e.g.
//                    "cudaMalloc cudaErrorMemoryAllocation"). Where every call fails (NVIDIA's
//                    runtime with no driver, the static build) the test derives the failures the
//                    tracer must count from this file.
//   --keep-going     a failed call is logged and the program goes on (exit 0); without it an
//                    unexpected failure prints "<file>:<line>: <call> failed: <name>" and exits 1.
//   --wait-for FILE  wait (at most 60 s, else exit 2) until FILE exists before the first CUDA call
//                    (a process started before the tracer; libcudart is mapped at exec already).
//   --repeat N       programs with a launch phase repeat it N times (default 1).
//
// Stdout carries only "PID <pid>" and "HANDLE <name>=<hex>" lines (for the test to find its
// process and streams in the tracer's JSON) and a last "<program>: PASS" line.
#pragma once

#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace trace_test {

struct Options {
  FILE* calls = nullptr;
  bool keep_going = false;
  const char* wait_for = nullptr;
  int repeat = 1;
};

inline Options& Opts() {
  static Options options;
  return options;
}

// Parses the common options; an unknown one is a usage error (exit 2).
inline void ParseOptions(int argc, char** argv) {
  Options& o = Opts();
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const bool has_value = i + 1 < argc;
    if (std::strcmp(a, "--keep-going") == 0) {
      o.keep_going = true;
    } else if (std::strcmp(a, "--calls") == 0 && has_value) {
      o.calls = std::fopen(argv[++i], "a");
      if (o.calls == nullptr) {
        std::perror(argv[i]);
        std::exit(2);
      }
      std::setvbuf(o.calls, nullptr, _IOLBF, 0);
    } else if (std::strcmp(a, "--wait-for") == 0 && has_value) {
      o.wait_for = argv[++i];
    } else if (std::strcmp(a, "--repeat") == 0 && has_value) {
      o.repeat = std::atoi(argv[++i]);
      if (o.repeat < 1) std::exit(2);
    } else {
      std::fprintf(stderr, "usage: %s [--calls FILE] [--keep-going] [--wait-for FILE] [--repeat N]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  std::printf("PID %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  if (o.wait_for != nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (access(o.wait_for, F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "%s: %s did not appear within 60 s\n", argv[0], o.wait_for);
        std::exit(2);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

// Logs one call's result; on failure clears the last error (so that a later launch's
// cudaGetLastError is its own) and, unless the failure was expected or --keep-going, exits 1.
inline cudaError_t Logged(const char* api, cudaError_t err, bool failure_expected, const char* file,
                          int line, const char* text) {
  Options& o = Opts();
  if (o.calls != nullptr) std::fprintf(o.calls, "%s %s\n", api, cudaGetErrorName(err));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (!failure_expected && !o.keep_going) {
      std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, text, cudaGetErrorName(err),
                   cudaGetErrorString(err));
      std::exit(1);
    }
  }
  return err;
}

inline void PrintHandle(const char* name, const void* handle) {
  std::printf("HANDLE %s=%#llx\n", name,
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(handle)));
}

inline int Pass(const char* program) {
  std::printf("%s: PASS\n", program);
  return 0;
}

}  // namespace trace_test

// CALL(api, expr): a call that must succeed (unless --keep-going). `api` is the entry point's
// name as the tracer's failure counts and the expectations name it.
#define CALL(api, expr) trace_test::Logged(api, (expr), false, __FILE__, __LINE__, #expr)
// CALL_MAY_FAIL(api, expr): a call whose failure the program expects (it checks the result).
#define CALL_MAY_FAIL(api, expr) trace_test::Logged(api, (expr), true, __FILE__, __LINE__, #expr)
// LAUNCHED(api): after a <<<>>> launch (or a launch whose result is in the last error).
#define LAUNCHED(api) trace_test::Logged(api, cudaGetLastError(), false, __FILE__, __LINE__, api)
