// LaunchLog: one JSON line per kernel launch a server accepted, for tests and debugging
// (flyt-gpu-server --launch-log PATH). With the simulated backend, where kernels do not run, it is
// how a test sees that a program's launches arrived exactly: kernel, grid, block, dynamic shared
// memory, stream and every argument's bytes.
//
//   {"client":3,"pid":4242,"seq":17,"kernel":"_Z6vecAddPKfS0_Pfi","grid":[4,1,1],
//    "block":[256,1,1],"shared_bytes":0,"stream":0,"sm_count":132,"param_bytes":28,"params":"<hex>",
//    "args":[{"offset":0,"size":8,"hex":"..."}, ...]}
//
// "args" is present when the kernel's parameter layout is known (read from the module's fatbin).
// Thread-safe, and safe across the client processes of one server: each line is one write(2) to
// an O_APPEND file, so concurrent lines never interleave.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "remote/types.h"

namespace flyt::remote {

struct LaunchRecord {
  uint64_t client_id = 0;
  uint32_t pid = 0;
  uint32_t seq = 0;
  std::string kernel;
  Dim3 grid;
  Dim3 block;
  uint32_t shared_bytes = 0;
  uint64_t stream = 0;  // the client's stream number (0: legacy default stream)
  uint32_t sm_count = 0;  // the SMs the client's session ran it with (its share; 0: unknown)
  std::span<const std::byte> params;
  struct Arg {
    uint32_t offset = 0;
    uint32_t size = 0;
  };
  std::optional<std::vector<Arg>> layout;
};

class LaunchLog {
 public:
  // Opens (appends to) `path`.
  static Result<std::unique_ptr<LaunchLog>> Open(const std::string& path);
  ~LaunchLog();
  LaunchLog(const LaunchLog&) = delete;
  LaunchLog& operator=(const LaunchLog&) = delete;

  void Append(const LaunchRecord& record);
  // The open file (client processes keep it open across their fork).
  int fd() const { return ::fileno(file_); }

  // The JSON line for a record (without the newline).
  static std::string Format(const LaunchRecord& record);

 private:
  explicit LaunchLog(std::FILE* file) : file_(file) {}
  Mutex mu_;  // one line written at a time
  std::FILE* file_;
};

}  // namespace flyt::remote
