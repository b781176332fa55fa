// ClientCore: a process's one link to its flyt GPU server, shared by flyt's two client libraries —
// libcuda.so.1 (the driver API, src/libcuda) and libcudart.so.13 (the runtime API, src/runtime).
//
// The core lives in libcuda.so.1 and flyt's libcudart.so.13 is linked against it, so a process
// holds one core whichever library it called first: NVIDIA's libraries (cuBLAS, cuFFT, ...) under
// a program that uses flyt's runtime reach the same connection, and device memory made through
// one library is valid in the other. Process() is the core; it is created on first use and never
// destroyed (atexit handlers of either library may still call in while the process ends).
//
// What it owns:
//   - the connection to the flyt GPU server (FLYT_SERVER=HOST:PORT or unix:PATH, else the one
//     the machine's flyt-client-manager leases: server_discovery.h), opened at the first call
//     that needs the device. A missing or unreachable server is remembered and reported by every
//     such call (kNoDevice / kInitializationError, logged once); a busy one or a cluster without
//     room now (kDevicesUnavailable) is not, and a later call tries again;
//   - the session with the flyt-client-manager that leased the server, open for the process's
//     life (it counts the program as connected);
//   - the posted work still buffered at exit (flushed by an atexit handler);
//   - the fork rule: a forked child shares its parent's socket, so it is cut off (every call
//     fails with kInitializationError, naming why);
//   - what both libraries must see of each other's objects: the device memory either allocated
//     (to classify a pointer, and to refuse a range that is no device memory of this process
//     before it leaves it), and the server's numbers of the streams and events either made, by
//     the handle the program holds (a cudaStream_t from flyt's runtime is a CUstream to
//     flyt's driver, as NVIDIA's libraries use it).
//
// Thread safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "remote/address_ranges.h"
#include "remote/cuda_status.h"
#include "remote_client/client.h"
#include "remote_client/server_discovery.h"

namespace spdlog {
class logger;
}

namespace flyt::remote {

// The CUDA version flyt's client libraries implement (sent in the hello; cuDriverGetVersion and
// cudaRuntimeGetVersion report the server's driver and this).
inline constexpr int32_t kClientCudaVersion = 13000;

class ClientCore {
 public:
  // The process's core (created on first use; see the file comment for where it lives).
  static ClientCore& Process();

  // The connection, opened on first use. Never null when ok.
  CudaResult<Connection*> Connect();
  // The connection when one is open and usable by this process, else null (no attempt to open).
  Connection* connected() const {
    return forked_child_.load(std::memory_order_relaxed) ? nullptr : conn_.load();
  }
  // The server's driver version (0 when no server can be reached).
  int driver_version();
  // Logs a failed call: the loss of the server connection once, as an error (a program's own
  // error check cannot explain it), anything else at debug level.
  void ReportFailure(const CudaStatus& status);
  // The core's log ("[flyt %l] ..." on stderr, level FLYT_LOG_LEVEL, default warn).
  spdlog::logger& log() { return *log_; }
  std::shared_ptr<spdlog::logger> shared_log() { return log_; }
  // ---- shared objects ------------------------------------------------------------------------
  // Device memory [ptr, ptr + bytes) of this process: an allocation, or a module's global.
  void AddDeviceRange(uint64_t ptr, uint64_t bytes, bool global = false);
  // Removes the allocation that starts at `ptr`; false (nothing removed) for anything else.
  bool RemoveDeviceAllocation(uint64_t ptr);
  // The range holding `ptr`: (base, size).
  std::optional<std::pair<uint64_t, uint64_t>> FindDeviceRange(uint64_t ptr) const;
  bool IsDeviceRange(uint64_t ptr, uint64_t bytes) const;
  void ClearDeviceRanges();  // a device reset: the server holds none any more
  // The server's number of a stream or event by the program's handle (0 when unknown).
  void AddHandle(const void* handle, uint64_t id);
  void RemoveHandle(const void* handle);
  uint64_t HandleId(const void* handle) const;
  void ClearHandles();

  // Whether flyt's runtime has used the connection: the driver API then behaves as under
  // NVIDIA's runtime (initialised, the primary context current on every thread that set none).
  void SetRuntimeActive() { runtime_active_.store(true, std::memory_order_release); }
  bool runtime_active() const { return runtime_active_.load(std::memory_order_acquire); }

  // "PROGRAM on HOST (pid N)": how this process is named to the server.
  static std::string ProgramLabel();

  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

 private:
  ClientCore();
  ~ClientCore() = delete;
  CudaResult<Connection*> OpenLocked() FLYT_REQUIRES(mu_);

  std::shared_ptr<spdlog::logger> log_;
  Mutex mu_;
  std::unique_ptr<Connection> connection_ FLYT_GUARDED_BY(mu_);
  std::optional<CudaStatus> connect_error_ FLYT_GUARDED_BY(mu_);
  std::unique_ptr<ManagerSession> manager_session_ FLYT_GUARDED_BY(mu_);
  // Once set, read without the lock.
  std::atomic<Connection*> conn_{nullptr};
  std::atomic<bool> loss_logged_{false};
  std::atomic<bool> forked_child_{false};
  std::atomic<bool> runtime_active_{false};

  mutable Mutex objects_mu_;
  AddressRanges<uint8_t> device_ranges_ FLYT_GUARDED_BY(objects_mu_);
  std::unordered_map<const void*, uint64_t> handles_ FLYT_GUARDED_BY(objects_mu_);
};

}  // namespace flyt::remote
