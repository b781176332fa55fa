// A test-only LD_PRELOAD library that stands in for libcudart's registration entry points and
// records what an nvcc-built program hands them: each fatbin wrapper (its version, and the
// containers FatbinsOfWrapper finds with the kernels in them) and each __cudaRegisterFunction
// name. fatbin_test runs the CUDA test programs under it to check FatbinsOfWrapper against real
// wrappers, -rdc=true (version 2) included, without a GPU or a driver.
//
// It writes one JSON object per __cudaRegisterFatBinaryEnd to $FLYT_CAPTURE_OUT and then ends
// the process with status 0 (the program's main would otherwise call the real, driverless
// runtime). Registration happens on the loading thread during static initialisation, so the
// state below needs no lock; it is the process-wide state this library exists to hold.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cuda/fatbin.h"

namespace {

struct Capture {
  nlohmann::json modules = nlohmann::json::array();
};

Capture& State() {
  static Capture* capture = new Capture;  // never destroyed: used until _exit
  return *capture;
}

nlohmann::json Describe(const void* wrapper) {
  nlohmann::json m;
  m["wrapper_version"] = static_cast<const int*>(wrapper)[1];
  auto spans = flyt::cuda::FatbinsOfWrapper(wrapper);
  if (!spans.ok()) {
    m["error"] = spans.status().message();
    return m;
  }
  nlohmann::json containers = nlohmann::json::array();
  for (const auto& span : *spans) {
    nlohmann::json c;
    c["size_bytes"] = span.size();
    auto fatbin = flyt::cuda::ParseFatbin(span);
    if (!fatbin.ok()) {
      c["error"] = fatbin.status().message();
    } else {
      auto kernels = flyt::cuda::KernelsOf(*fatbin);
      if (!kernels.ok()) {
        c["error"] = kernels.status().message();
      } else {
        nlohmann::json names = nlohmann::json::array();
        for (const auto& k : *kernels) {
          names.push_back({{"name", k.name},
                           {"sm_arch", k.sm_arch},
                           {"param_bytes", k.param_bytes},
                           {"from_ptx", k.from_ptx}});
        }
        c["kernels"] = names;
        c["entries"] = fatbin->entries.size();
      }
    }
    containers.push_back(c);
  }
  m["containers"] = containers;
  return m;
}

}  // namespace

extern "C" {

void** __cudaRegisterFatBinary(void* fat_cubin) noexcept {
  try {
    nlohmann::json m = Describe(fat_cubin);
    m["functions"] = nlohmann::json::array();
    m["variables"] = nlohmann::json::array();
    State().modules.push_back(std::move(m));
  } catch (...) {
    std::_Exit(3);
  }
  static void* handle = nullptr;
  return &handle;
}

void __cudaRegisterFunction(void** /*handle*/, const char* /*host_fun*/, char* device_fun,
                            const char* /*device_name*/, int /*thread_limit*/, void* /*tid*/,
                            void* /*bid*/, void* /*block_dim*/, void* /*grid_dim*/,
                            int* /*warp_size*/) noexcept {
  try {
    if (!State().modules.empty()) State().modules.back()["functions"].push_back(device_fun);
  } catch (...) {
    std::_Exit(3);
  }
}

void __cudaRegisterVar(void** /*handle*/, char* /*host_var*/, char* /*device_address*/,
                       const char* device_name, int /*ext*/, size_t size, int constant,
                       int /*global*/) noexcept {
  try {
    if (!State().modules.empty()) {
      State().modules.back()["variables"].push_back(
          {{"name", device_name}, {"size_bytes", size}, {"constant", constant != 0}});
    }
  } catch (...) {
    std::_Exit(3);
  }
}

void __cudaRegisterFatBinaryEnd(void** /*handle*/) noexcept {
  const char* path = std::getenv("FLYT_CAPTURE_OUT");
  if (path == nullptr) return;
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) std::_Exit(4);
  const std::string text = State().modules.dump();
  std::fputs(text.c_str(), f);
  std::fclose(f);
  _exit(0);
}

void __cudaUnregisterFatBinary(void** /*handle*/) noexcept {}

}  // extern "C"
