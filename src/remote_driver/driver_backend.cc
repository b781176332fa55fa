// The driver backend: loads libcuda (cuda_driver::Library), opens the device, creates a context
// per session and hands it to a DriverSession (driver_session.cc); the error conversions every
// driver call goes through.
#include "remote_driver/driver_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "cuda/elf.h"
#include "cuda/fatbin.h"
#include "cuda_driver/cuda_driver_types.h"
#include "cuda_driver/library.h"

#include "remote_driver/driver_internal.h"

namespace flyt::remote {
namespace driver_impl {

CudaStatus DriverError(const Driver& driver, std::string_view call, CUresult code) {
  return {CudaErrorFromDriver(code), driver.ErrorMessage(call, code)};
}

CudaStatus DriverError(const Driver& driver, std::string_view call, CUresult code, ErrorCode as) {
  return {as, driver.ErrorMessage(call, code)};
}

std::string MpsHint(int sm_count) {
  return "--sm-count " + std::to_string(sm_count) +
         " limits each client's context to that many SMs (CUDA execution affinity), which needs "
         "the MPS control daemon running for this GPU with per-context SM partitioning "
         "(CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING=1 nvidia-cuda-mps-control "
         "-d) on a Volta or newer GPU";
}

}  // namespace driver_impl

using namespace driver_impl;  // NOLINT: the driver API's names and the shared parts

namespace {

constexpr std::string_view kNoDriverHint =
    "the driver backend needs the NVIDIA driver's libcuda.so.1 and a GPU (on a machine without "
    "one, run flyt-gpu-server --backend=sim)";

// For start-up failures, which are flyt Status (the server refuses to start), not CUDA codes.
Status DriverStatus(const Driver& driver, std::string_view call, CUresult code) {
  StatusCode status_code = StatusCode::kInternal;
  switch (code) {
    case CUDA_ERROR_INVALID_DEVICE:
      status_code = StatusCode::kInvalidArgument;
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      status_code = StatusCode::kNotSupported;
      break;
    case CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY:
      status_code = StatusCode::kFailedPrecondition;
      break;
    default:
      switch (CudaErrorFromDriver(code)) {
        case ErrorCode::kMemoryAllocation:
          status_code = StatusCode::kResourceExhausted;
          break;
        case ErrorCode::kNoDevice:
        case ErrorCode::kStubLibrary:
        case ErrorCode::kInsufficientDriver:
        case ErrorCode::kSystemDriverMismatch:
        case ErrorCode::kSystemNotReady:
        case ErrorCode::kDevicesUnavailable:
        case ErrorCode::kInitializationError:
        case ErrorCode::kCompatNotSupportedOnDevice:
        case ErrorCode::kMpsConnectionFailed:
        case ErrorCode::kMpsServerNotReady:
          status_code = StatusCode::kUnavailable;
          break;
        default:
          break;
      }
  }
  return {status_code, driver.ErrorMessage(call, code)};
}

// ---------------------------------------------------------------------------------------------
// The backend.

// Immutable after construction; the driver's device queries are thread-safe, so every method may
// be called from any thread.
class DriverBackend final : public Backend {
 public:
  DriverBackend(DriverPtr driver, CUdevice device, int ordinal, std::optional<int> sm_count,
                std::optional<int> granted_sm_count, int device_sm_count, DeviceIdentity identity)
      : driver_(std::move(driver)),
        device_(device),
        ordinal_(ordinal),
        sm_count_(sm_count),
        granted_sm_count_(granted_sm_count),
        device_sm_count_(device_sm_count),
        identity_(std::move(identity)) {
    identity_.sm_count_total = device_sm_count_;
    identity_.sm_count_granted =
        sm_count_ ? granted_sm_count_.value_or(*sm_count_) : device_sm_count_;
  }

  std::string Name() const override { return "driver"; }

  std::string Describe() const override {
    char line[512];
    const int v = identity_.driver_version;
    std::snprintf(line, sizeof line, "%s (device %d), %d SMs, %.1f GiB, CUDA driver %d.%d (%s)",
                  identity_.name.c_str(), ordinal_, device_sm_count_,
                  static_cast<double>(identity_.total_memory_bytes) / (1 << 30), v / 1000,
                  (v % 1000) / 10, driver_->path().c_str());
    std::string text = line;
    if (sm_count_) {
      text += "; each client limited to " + std::to_string(granted_sm_count_.value_or(*sm_count_)) +
              " SMs (asked " + std::to_string(*sm_count_) + ", MPS execution affinity)";
    }
    return text;
  }

  DeviceIdentity Identity() const override { return identity_; }

  CudaResult<int32_t> DeviceAttribute(uint32_t attr) const override {
    // With an SM share, the client sees the SMs it may use, as under MPS.
    if (attr == static_cast<uint32_t>(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) && sm_count_) {
      return int32_t{identity_.sm_count_granted};
    }
    int value = 0;
    CUresult rc =
        driver_->api().DeviceGetAttribute(&value, static_cast<CUdevice_attribute>(attr), device_);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuDeviceGetAttribute", rc);
    return int32_t{value};
  }

  CudaResult<std::unique_ptr<Session>> OpenSession(const std::string& client_label) override {
    FLYT_CUDA_ASSIGN_OR_RETURN(std::shared_ptr<Context> ctx,
                               Context::Create(driver_, device_, sm_count_));
    return OpenDriverSession(driver_, device_, sm_count_, client_label, std::move(ctx));
  }

 private:
  const DriverPtr driver_;
  const CUdevice device_;
  const int ordinal_;
  const std::optional<int> sm_count_;
  const std::optional<int> granted_sm_count_;
  const int device_sm_count_;
  DeviceIdentity identity_;  // set in the constructor, then immutable
};

Status FailedPrecondition(std::string message) {
  return {StatusCode::kFailedPrecondition, std::move(message)};
}

Status FromCudaStatus(const CudaStatus& status, StatusCode code) {
  return {code, status.message()};
}

}  // namespace

CudaError CudaErrorFromDriver(int cu_result) {
  switch (cu_result) {
    // Codes without a runtime number. CONTEXT_ALREADY_CURRENT has not been returned since CUDA
    // 3.2; KEY_ROTATION (confidential computing) has no cudaError_t in CUDA 13's driver_types.h.
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT:
    case CUDA_ERROR_KEY_ROTATION:
      return ErrorCode::kUnknown;
      // Every other CUresult has the cudaError_t of the same number, where the runtime has one
      // (CUDA_ERROR_OUT_OF_MEMORY 2 = cudaErrorMemoryAllocation, CUDA_ERROR_INVALID_CONTEXT 201 =
      // cudaErrorDeviceUninitialized, CUDA_ERROR_INVALID_HANDLE 400 =
      // cudaErrorInvalidResourceHandle, CUDA_ERROR_NOT_FOUND 500 = cudaErrorSymbolNotFound, ...).
#define FLYT_CUDA_ERROR(name, value, sticky, text) \
  case value:                                      \
    return ErrorCode::k##name;
#include "cuda/cuda_errors.def"
#undef FLYT_CUDA_ERROR
    default:
      return ErrorCode::kUnknown;
  }
}

std::vector<std::pair<std::string, std::string>> MpsEnvironment(int ordinal,
                                                                uint64_t memory_limit_mb) {
  std::vector<std::pair<std::string, std::string>> env;
  if (memory_limit_mb != 0) {
    env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                     std::to_string(ordinal) + "=" + std::to_string(memory_limit_mb) + "M");
  }
  return env;
}

Result<std::unique_ptr<Backend>> MakeDriverBackend(const DriverOptions& options_in) {
  DriverOptions options = options_in;
  if (options.sm_count && options.sm_percent) {
    return InvalidArgument("--sm-count and --sm-percent are mutually exclusive");
  }
  if (options.sm_percent && (*options.sm_percent < 1 || *options.sm_percent > 100)) {
    return InvalidArgument("--sm-percent " + std::to_string(*options.sm_percent) +
                           " is outside 1..100");
  }
  // Before the driver reads its environment (cuInit): the MPS client reads these there.
  for (const auto& [name, value] : options.environment) {
    if (::setenv(name.c_str(), value.c_str(), 1) != 0) return ErrnoError("setenv " + name, errno);
    spdlog::debug("driver backend: {}={}", name, value);
  }
  Result<std::unique_ptr<Driver>> loaded = Driver::Load(options.library);
  if (!loaded.ok()) {
    return Status(loaded.status().code(),
                  loaded.status().message() + "; " + std::string(kNoDriverHint));
  }
  DriverPtr driver = std::move(loaded).value();
  const FunctionTable& fn = driver->api();

  CUresult rc = fn.Init(0);
  if (rc == CUDA_ERROR_STUB_LIBRARY) {
    return Unavailable(options.library +
                       " is NVIDIA's stub libcuda.so (for linking only), not a driver; " +
                       std::string(kNoDriverHint));
  }
  if (rc == CUDA_ERROR_NO_DEVICE) {
    return Unavailable(driver->ErrorMessage("cuInit", rc) + "; " + std::string(kNoDriverHint));
  }
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuInit", rc);

  int driver_version = 0;
  rc = fn.DriverGetVersion(&driver_version);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDriverGetVersion", rc);

  int count = 0;
  rc = fn.DeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetCount", rc);
  if (options.device < 0 || options.device >= count) {
    return InvalidArgument("device " + std::to_string(options.device) +
                           " does not exist: the driver sees " + std::to_string(count) +
                           " CUDA device(s)" +
                           (count > 0 ? " (0.." + std::to_string(count - 1) + ")" : ""));
  }
  CUdevice device = 0;
  rc = fn.DeviceGet(&device, options.device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGet", rc);

  DeviceIdentity identity;
  identity.driver_version = driver_version;
  char name[256] = {};
  rc = fn.DeviceGetName(name, sizeof name - 1, device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetName", rc);
  identity.name = name;
  size_t total_bytes = 0;
  rc = fn.DeviceTotalMem(&total_bytes, device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceTotalMem", rc);
  identity.total_memory_bytes = total_bytes;
  if (fn.DeviceGetUuid != nullptr) {
    CUuuid uuid{};
    if (fn.DeviceGetUuid(&uuid, device) == CUDA_SUCCESS) {
      std::memcpy(identity.uuid.data(), uuid.bytes, identity.uuid.size());
    }
  }
  int device_sm_count = 0;
  rc = fn.DeviceGetAttribute(&device_sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetAttribute(SM count)", rc);
  if (options.sm_percent) {
    options.sm_count = static_cast<int>(
        (int64_t{*options.sm_percent} * device_sm_count + 99) / 100);
    spdlog::info("driver backend: --sm-percent {} of {} SMs is {} SMs", *options.sm_percent,
                 device_sm_count, *options.sm_count);
  }
  // MPS provides execution affinity by SM count; without it the driver cannot limit SMs.
  bool affinity_supported = false;
  if (fn.DeviceGetExecAffinitySupport != nullptr) {
    int supported = 0;
    affinity_supported = fn.DeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT,
                                                         device) == CUDA_SUCCESS &&
                         supported != 0;
  }
  identity.mps = affinity_supported;
  identity.sm_granularity = options.default_sm_granularity;
  if (options.measure_sm_granularity && affinity_supported) {
    CudaResult<std::shared_ptr<Context>> one = Context::Create(driver, device, 1);
    if (one.ok()) {
      if (std::optional<int> step = (*one)->GrantedSmCount(); step && *step > 0) {
        identity.sm_granularity = *step;
        identity.sm_granularity_measured = true;
      }
    }
  }

  if (options.sm_count) {
    const int asked = *options.sm_count;
    if (asked < 1 || asked > device_sm_count) {
      return InvalidArgument("--sm-count " + std::to_string(asked) + " is outside 1.." +
                             std::to_string(device_sm_count) + " (the SMs of " + identity.name +
                             ")");
    }
    if (fn.DeviceGetExecAffinitySupport == nullptr) {
      return NotSupported("this driver (" + std::to_string(driver_version) +
                          ") has no execution affinity (CUDA 11.4+ needed); " + MpsHint(asked));
    }
    int supported = 0;
    rc = fn.DeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, device);
    if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetExecAffinitySupport", rc);
    if (supported == 0) {
      return FailedPrecondition(identity.name + " cannot limit a context's SMs here (MPS is not " +
                                "running?): " + MpsHint(asked));
    }
  }

  // A probe context: the device can host clients (not exclusive-process and taken, not out of
  // memory, the SM limit accepted), and the SM count the driver really grants.
  std::optional<int> granted;
  {
    CudaResult<std::shared_ptr<Context>> probe = Context::Create(driver, device, options.sm_count);
    if (!probe.ok()) {
      const ErrorCode error = probe.status().code();
      const bool affinity_refused =
          options.sm_count &&
          (error == ErrorCode::kUnsupportedExecAffinity || error == ErrorCode::kNotSupported);
      const StatusCode code =
          affinity_refused ? StatusCode::kFailedPrecondition : StatusCode::kUnavailable;
      return FromCudaStatus(probe.status(), code)
          .WithContext("cannot create a CUDA context on device " + std::to_string(options.device));
    }
    if (options.sm_count) {
      granted = (*probe)->GrantedSmCount();
      if (options.probed_granted_sm_count &&
          (!granted || *granted > *options.probed_granted_sm_count)) {
        spdlog::info("driver backend: the context reports {} SMs under the MPS client limits; "
                     "clients see the {} granted without them",
                     granted ? std::to_string(*granted) : std::string("no count of"),
                     *options.probed_granted_sm_count);
        granted = options.probed_granted_sm_count;
      }
      spdlog::info("driver backend: clients' contexts get {} SMs of {} (asked {})",
                   granted ? std::to_string(*granted) : std::string("an unknown number of"),
                   device_sm_count, *options.sm_count);
    }
  }
  return std::unique_ptr<Backend>(
      std::make_unique<DriverBackend>(std::move(driver), device, options.device, options.sm_count,
                                      granted, device_sm_count, std::move(identity)));
}

}  // namespace flyt::remote
