// `flytctl cuda inspect`: the device code a CUDA program carries, as flyt's runtime will see it.
//
// The input is a host program or shared library built by nvcc (its .nv_fatbin and
// __nv_relfatbin sections are read), a raw .fatbin file (one or more containers back to back), a
// single cubin, or a PTX file (named *.ptx). The result lists every container with its entries
// (kind, SM architecture, compression, sizes) and every kernel with its parameter layout and
// resources, the same data the remote runtime uses to marshal launches. Inspection only reads the
// given bytes; these are pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "cuda/fatbin.h"

namespace flyt::ctl {

struct CudaContainer {
  std::string section;  // ".nv_fatbin", "__nv_relfatbin", or "" for a raw .fatbin / cubin file
  uint64_t offset = 0;  // of the container within its section or file
  cuda::Fatbin fatbin;  // empty for a lone cubin or PTX file
  std::vector<cuda::KernelInfo> kernels;
};

struct CudaInspection {
  std::string path;
  std::string format;  // "host ELF", "fatbin", "cubin" or "ptx"
  std::vector<CudaContainer> containers;
};

// Reads `bytes` (the contents of `path`, named in messages).
[[nodiscard]] Result<CudaInspection> InspectCuda(std::span<const std::byte> bytes,
                                                 std::string_view path);
[[nodiscard]] Result<CudaInspection> InspectCudaFile(const std::string& path);

// A person's view: per container, a table of entries, then each kernel with its resources and a
// table of its parameters. Names from the file pass through Printable().
std::string RenderCudaInspection(const CudaInspection& inspection);
// The same data for scripts (--json). Absent resources are null.
nlohmann::json CudaInspectionToJson(const CudaInspection& inspection);

}  // namespace flyt::ctl
