// The simulated device's interprocess memory and events (see backend.h, handlers_ipc.cc).
//
// Exporting an allocation moves its bytes into a memfd (once; sealed so that it can neither shrink
// nor grow) and keeps its device address. The handle names the serving process, the memfd's
// descriptor there, the allocation's size and 16 random bytes that are also the memfd's name:
//
//   0  "FLYTIPCM"   8  pid (u32)   12  fd (u32)   16  bytes (u64)   24  secret (16)   40  zero
//
// Opening it (in another client's session: another process with a process per client, or the
// same one) opens /proc/<pid>/fd/<fd>, and maps it only if the descriptor is that memfd (its name
// holds the secret), sealed, and large enough: both sides then see the same bytes. A handle of
// another server or a guessed one names no such memfd and is refused; the exporter's process
// must still be running when the handle is opened, and its memory stays mapped in the opener
// until closed; a client cannot open its own handle (as in CUDA). An event handle ("FLYTIPCE",
// then the exporter's pid and 16 random bytes) opens as a new event of the session: the simulated
// device finishes work as it is issued, so an event anyone recorded is already complete, as is one
// never recorded. Its bytes are not checked beyond the magic and pid: it grants nothing.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>

#include "remote_sim/sim_internal.h"

namespace flyt::remote::sim_internal {
namespace {

constexpr char kMemMagic[8] = {'F', 'L', 'Y', 'T', 'I', 'P', 'C', 'M'};
constexpr char kEventMagic[8] = {'F', 'L', 'Y', 'T', 'I', 'P', 'C', 'E'};
constexpr size_t kSecretBytes = 16;
constexpr size_t kPage = 4096;
constexpr uint32_t kEventInterprocess = 0x4;
constexpr size_t kMaxSharedAllocations = 4096;

std::string MemfdName(const std::byte* secret) {
  std::string name = "flyt-ipc-";
  char hex[3];
  for (size_t i = 0; i < kSecretBytes; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(secret[i]));
    name += hex;
  }
  return name;
}

bool RandomBytes(std::byte* out, size_t n) {
  return ::getrandom(out, n, 0) == static_cast<ssize_t>(n);
}

template <typename T>
void Put(std::vector<std::byte>& h, size_t at, T value) {
  std::memcpy(h.data() + at, &value, sizeof value);
}
template <typename T>
T Get(const std::vector<std::byte>& h, size_t at) {
  T value;
  std::memcpy(&value, h.data() + at, sizeof value);
  return value;
}

CudaStatus NotAHandle(const std::string& why) {
  return Error(CudaError::kInvalidValue, "not an IPC memory handle of this server: " + why);
}

}  // namespace

bool Block::Share(const std::string& name) {
  if (fd_ >= 0) return true;
  const size_t size = (std::max<size_t>(bytes_, 1) + kPage - 1) / kPage * kPage;
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return false;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    ::close(fd);
    return false;
  }
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) {
    ::close(fd);
    return false;
  }
  // Copied in chunks, all-zero chunks skipped: the memfd starts zeroed, and an untouched
  // (MAP_NORESERVE) allocation commits no memory by being shared.
  constexpr size_t kChunk = 64 << 10;
  static const std::byte kZeros[kChunk] = {};
  auto* out = static_cast<std::byte*>(at);
  for (size_t off = 0; off < bytes_; off += kChunk) {
    const size_t n = std::min(kChunk, bytes_ - off);
    if (std::memcmp(data_ + off, kZeros, n) != 0) std::memcpy(out + off, data_ + off, n);
  }
  // The device address is the block's own (the backend's address space), so the shared mapping
  // simply replaces the old memory.
  if (mapped_ != 0) {
    ::munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
  data_ = out;
  mapped_ = size;
  fd_ = fd;
  return true;
}

CudaResult<std::vector<std::byte>> SimSession::IpcGetMemHandle(DevicePtr base) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  auto it = allocations_.find(base);
  if (it == allocations_.end()) return Error(CudaError::kInvalidValue, "not an allocation");
  Block& block = *it->second;
  std::vector<std::byte> handle(kIpcHandleBytes);
  std::memcpy(handle.data(), kMemMagic, sizeof kMemMagic);
  if (block.shared_fd() < 0) {
    // Each shared allocation holds a descriptor of the serving process: a bounded number.
    size_t shared = 0;
    for (const auto& [ptr, b] : allocations_) shared += b->shared_fd() >= 0 ? 1 : 0;
    if (shared >= kMaxSharedAllocations) {
      return Error(CudaError::kMemoryAllocation,
                   "this client shares " + std::to_string(shared) + " allocations already");
    }
    std::byte secret[kSecretBytes];
    if (!RandomBytes(secret, sizeof secret) || !block.Share(MemfdName(secret))) {
      return Error(CudaError::kMemoryAllocation, "cannot make the allocation shareable");
    }
  }
  // The secret is the memfd's name: read it back from the descriptor.
  char link[128] = {};
  std::string fd_path = "/proc/self/fd/" + std::to_string(block.shared_fd());
  ssize_t n = ::readlink(fd_path.c_str(), link, sizeof link - 1);
  std::string name(link, n > 0 ? static_cast<size_t>(n) : 0);
  const std::string prefix = "/memfd:flyt-ipc-";
  if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + 2 * kSecretBytes) {
    return Error(CudaError::kUnknown, "the shared allocation's memfd lost its name");
  }
  for (size_t i = 0; i < kSecretBytes; ++i) {
    unsigned byte = 0;
    std::sscanf(name.c_str() + prefix.size() + 2 * i, "%2x", &byte);
    handle[24 + i] = static_cast<std::byte>(byte);
  }
  Put<uint32_t>(handle, 8, static_cast<uint32_t>(::getpid()));
  Put<uint32_t>(handle, 12, static_cast<uint32_t>(block.shared_fd()));
  Put<uint64_t>(handle, 16, block.bytes());
  return handle;
}

CudaResult<std::pair<DevicePtr, uint64_t>> SimSession::IpcOpenMemHandle(
    const std::vector<std::byte>& handle) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  if (handle.size() != kIpcHandleBytes || std::memcmp(handle.data(), kMemMagic, 8) != 0) {
    return NotAHandle("no flyt magic");
  }
  for (size_t i = 24 + kSecretBytes; i < kIpcHandleBytes; ++i) {
    if (handle[i] != std::byte{0}) return NotAHandle("reserved bytes set");
  }
  const uint32_t pid = Get<uint32_t>(handle, 8);
  const uint32_t fd_number = Get<uint32_t>(handle, 12);
  const uint64_t bytes = Get<uint64_t>(handle, 16);
  if (pid == 0 || bytes == 0 || bytes > (uint64_t{1} << 46)) return NotAHandle("bad fields");
  if (pid == static_cast<uint32_t>(::getpid())) {
    for (const auto& [ptr, b] : allocations_) {
      if (b->shared_fd() == static_cast<int>(fd_number)) {
        return Error(CudaError::kInvalidValue,
                     "a handle cannot be opened by the client that exported it");
      }
    }
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd_number);
  char link[128] = {};
  ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  const std::string expected = "/memfd:" + MemfdName(handle.data() + 24) + " (deleted)";
  if (n <= 0 || std::string(link, static_cast<size_t>(n)) != expected) {
    return NotAHandle("no such shared allocation (its process is gone, or the handle is forged)");
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return NotAHandle("cannot open the shared allocation: " + std::string(strerror(errno)));
  struct stat st {};
  const int seals = ::fcntl(fd, F_GET_SEALS);
  const uint64_t size = (bytes + kPage - 1) / kPage * kPage;
  // Opened by path, so the file is checked again: the very memfd, sealed, and large enough.
  n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof link - 1);
  if (n <= 0 || std::string(link, static_cast<size_t>(n)) != expected || ::fstat(fd, &st) != 0 ||
      seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
      static_cast<uint64_t>(st.st_size) != size) {
    ::close(fd);
    return NotAHandle("the shared allocation is not sealed at its size");
  }
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the memory
  if (at == MAP_FAILED) {
    return Error(CudaError::kMemoryAllocation, "cannot map the shared allocation");
  }
  // A device address of this backend's own: the exporter's may be taken here.
  auto block = std::make_unique<Block>(static_cast<std::byte*>(at), size, bytes, -1,
                                       &backend_.address_space());
  if (!block->ok()) {
    return Error(CudaError::kMemoryAllocation, "no device address left for the shared allocation");
  }
  DevicePtr ptr = block->address();
  if (!ranges_.Add(ptr, bytes, block.get())) {
    return Error(CudaError::kUnknown, "the opened memory overlaps the simulated device's");
  }
  ipc_imports_.emplace(ptr, std::move(block));
  return std::make_pair(ptr, bytes);
}

CudaStatus SimSession::IpcCloseMemHandle(DevicePtr ptr) {
  auto it = ipc_imports_.find(ptr);
  if (it == ipc_imports_.end()) return Error(CudaError::kInvalidValue, "not opened IPC memory");
  ranges_.Remove(ptr);
  ipc_imports_.erase(it);
  return CudaStatus::Ok();
}

CudaResult<std::vector<std::byte>> SimSession::IpcGetEventHandle(EventHandle event) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  FLYT_CUDA_ASSIGN_OR_RETURN(Event * e, FindEvent(event));
  if ((e->flags & kEventInterprocess) == 0) {
    return Error(CudaError::kInvalidResourceHandle,
                 "the event was not created with cudaEventInterprocess");
  }
  std::vector<std::byte> handle(kIpcHandleBytes);
  std::memcpy(handle.data(), kEventMagic, sizeof kEventMagic);
  Put<uint32_t>(handle, 8, static_cast<uint32_t>(::getpid()));
  if (!RandomBytes(handle.data() + 24, kSecretBytes)) {
    return Error(CudaError::kUnknown, "no random bytes for the event handle");
  }
  return handle;
}

CudaResult<EventHandle> SimSession::IpcOpenEventHandle(const std::vector<std::byte>& handle) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  if (handle.size() != kIpcHandleBytes || std::memcmp(handle.data(), kEventMagic, 8) != 0 ||
      Get<uint32_t>(handle, 8) == 0) {
    return Error(CudaError::kInvalidValue, "not an IPC event handle of this server");
  }
  return EventCreate(kEventInterprocess | kEventDisableTiming);
}

}  // namespace flyt::remote::sim_internal
