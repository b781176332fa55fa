// flyt's libcudart.so.13: the CUDA runtime's managed family (issue 17) — cudaMallocManaged,
// __managed__ variables, cudaMemPrefetchAsync, cudaMemAdvise, cudaMemRangeGetAttribute(s),
// and the IPC calls (refused: see below). See runtime.h and docs/_i17/managed.md.
//
// Unified memory, emulated. Each managed range has a host mirror: a memfd mapped twice, once for
// the program (the "user view", at the address its device copy has on the server, so that one
// pointer works on both sides) and once for this runtime (the "internal view", always writable,
// so that filling and sending pages never faults). Each page of a mirror is in one state:
//   kClean  host and device hold the same bytes; the user view is read-only, so the first write
//           faults: the SIGSEGV handler marks the page kDirty and makes it writable;
//   kDirty  the host wrote it since the last push; pushed (one posted copy per run of pages) before
//           the next launch, copy or memset that involves the device;
//   kStale  the device may have written it (every launch makes every mirror stale: a kernel may
//           write any page, and no one can tell which on a GPU); the user view is PROT_NONE, so the
//           first access faults and the handler fetches the page — and, when faults come in
//           address order, up to kMaxReadaheadPages after it — from the device.
// So bytes moved per iteration follow the pages touched, not the buffer. Concurrent host access
// while a kernel runs is what concurrentManagedAccess = 0 forbids (CUDA faults it; here the host
// sees the bytes of before the launch, fetched at once).
//
// The SIGSEGV handler chains to the program's previous one for every fault outside a mirror (or
// restores the default action, so the process dies as it would have). A program that installs
// its own SIGSEGV handler after its first managed allocation must chain to flyt's in turn.
//
// Thread safety: one mutex guards the mirrors; the handler finds a mirror through a lock-free
// table first, so faults elsewhere never take the lock.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/mutex.h"
#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

constexpr size_t kPage = 4096;
constexpr size_t kMaxReadaheadPages = 64;
constexpr size_t kSlots = 4096;  // mirrors the handler can see at once

enum PageState : uint8_t { kClean = 0, kDirty = 1, kStale = 2 };

struct Mirror {
  uint64_t base = 0;   // user view == device address
  size_t bytes = 0;    // as allocated
  // The device-backed byte ranges [offset, offset + bytes) of the mirror; empty: all of [0,
  // bytes). A group of __managed__ variables the driver packed into shared pages is one mirror
  // over their pages, and only the variables' own bytes move.
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t mapped = 0;   // rounded to pages
  int fd = -1;
  std::byte* internal = nullptr;
  std::vector<uint8_t> state;
  bool variable = false;  // a __managed__ variable (never cudaFree'd)
  size_t next_fault_page = SIZE_MAX;
  size_t readahead = 1;
  // cudaMemAdvise / cudaMemPrefetchAsync, for cudaMemRangeGetAttribute (whole-mirror granularity).
  bool read_mostly = false;
  int preferred = -2;  // cudaInvalidDeviceId; -1 cudaCpuDeviceId; 0 the device
  bool accessed_by = false;
  int last_prefetch = -2;
};

struct Slot {
  std::atomic<uint64_t> base{0};
  std::atomic<uint64_t> end{0};
};

class ManagedSpace {
 public:
  static ManagedSpace& Get() {
    static ManagedSpace* space = new ManagedSpace();  // never destroyed (handler may run late)
    return *space;
  }

  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

  // A new mirror of `bytes`, mapped wherever the kernel puts it; not yet visible to the handler.
  CudaResult<std::unique_ptr<Mirror>> Create(size_t bytes) {
    auto m = std::make_unique<Mirror>();
    m->bytes = bytes;
    m->mapped = (bytes + kPage - 1) / kPage * kPage;
    m->fd = ::memfd_create("flyt-managed", MFD_CLOEXEC);
    if (m->fd < 0 || ::ftruncate(m->fd, static_cast<off_t>(m->mapped)) != 0) {
      Drop(*m);
      return Error(CudaError::kMemoryAllocation, "no host memory for a managed mirror");
    }
    void* internal = ::mmap(nullptr, m->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    void* user = ::mmap(nullptr, m->mapped, PROT_READ, MAP_SHARED, m->fd, 0);
    if (internal == MAP_FAILED || user == MAP_FAILED) {
      if (internal != MAP_FAILED) ::munmap(internal, m->mapped);
      if (user != MAP_FAILED) ::munmap(user, m->mapped);
      Drop(*m);
      return Error(CudaError::kMemoryAllocation, "no address space for a managed mirror");
    }
    m->internal = static_cast<std::byte*>(internal);
    m->base = reinterpret_cast<uint64_t>(user);
    m->state.assign(m->mapped / kPage, kClean);
    return m;
  }

  // Moves the user view to `address` (the device copy's address), if it is not there.
  CudaStatus Place(Mirror& m, uint64_t address) {
    if (address == m.base) return CudaStatus::Ok();
    void* moved = ::mmap(reinterpret_cast<void*>(address), m.mapped, PROT_READ,
                         MAP_SHARED | MAP_FIXED_NOREPLACE, m.fd, 0);
    if (moved == MAP_FAILED || reinterpret_cast<uint64_t>(moved) != address) {
      if (moved != MAP_FAILED) ::munmap(moved, m.mapped);
      return Error(CudaError::kMemoryAllocation,
                   "the host mirror of managed memory cannot be mapped at its device address");
    }
    ::munmap(reinterpret_cast<void*>(m.base), m.mapped);
    m.base = address;
    return CudaStatus::Ok();
  }

  // Makes a placed mirror live: the handler sees it, the runtime pushes and fetches it.
  CudaStatus Publish(std::unique_ptr<Mirror> m, PageState initial) {
    InstallHandler();
    MutexLock lock(mu_);
    Slot* free_slot = nullptr;
    for (Slot& s : slots_) {
      if (s.end.load() == 0) {
        free_slot = &s;
        break;
      }
    }
    if (free_slot == nullptr) {
      return Error(CudaError::kMemoryAllocation, "too many managed allocations");
    }
    std::fill(m->state.begin(), m->state.end(), initial);
    ::mprotect(reinterpret_cast<void*>(m->base), m->mapped,
               initial == kStale ? PROT_NONE : PROT_READ);
    free_slot->base.store(m->base);
    free_slot->end.store(m->base + m->mapped);
    uint64_t base = m->base;
    mirrors_.emplace(base, std::move(m));
    count_.fetch_add(1, std::memory_order_release);
    return CudaStatus::Ok();
  }

  void Destroy(uint64_t base) {
    MutexLock lock(mu_);
    auto it = mirrors_.find(base);
    if (it == mirrors_.end() || it->second->variable) return;
    Unlink(*it->second);
    mirrors_.erase(it);
  }

  void DestroyAll() {
    MutexLock lock(mu_);
    for (auto& [base, m] : mirrors_) Unlink(*m);
    mirrors_.clear();
    placed_vars_.clear();
  }

  bool IsManaged(const void* ptr) {
    if (empty()) return false;
    MutexLock lock(mu_);
    return FindLocked(reinterpret_cast<uint64_t>(ptr)) != nullptr;
  }

  // Pushes dirty pages (of [lo, hi) only, when given) on `stream`.
  CudaStatus Push(uint64_t stream, uint64_t lo = 0, uint64_t hi = UINT64_MAX) {
    if (empty()) return CudaStatus::Ok();
    MutexLock lock(mu_);
    for (auto& [base, m] : mirrors_) {
      if (base + m->mapped <= lo || base >= hi) continue;
      FLYT_CUDA_RETURN_IF_ERROR(PushLocked(*m, stream, lo, hi));
    }
    return CudaStatus::Ok();
  }

  // Marks pages stale: all of every mirror, or those of [ptr, ptr + bytes).
  void Invalidate(uint64_t lo = 0, uint64_t hi = UINT64_MAX) {
    if (empty()) return;
    MutexLock lock(mu_);
    for (auto& [base, m] : mirrors_) {
      if (base + m->mapped <= lo || base >= hi) continue;
      size_t first = lo > base ? (lo - base) / kPage : 0;
      size_t last = std::min<uint64_t>(m->mapped, hi - std::min(hi, base) + kPage - 1) / kPage;
      if (hi == UINT64_MAX) last = m->state.size();
      last = std::min(last, m->state.size());
      if (first >= last) continue;
      std::fill(m->state.begin() + first, m->state.begin() + last, kStale);
      ::mprotect(reinterpret_cast<void*>(base + first * kPage), (last - first) * kPage, PROT_NONE);
      m->next_fault_page = SIZE_MAX;
    }
  }

  // The runtime is about to read (or write) [ptr, ptr + bytes) of a mirror as host memory.
  CudaStatus HostUse(uint64_t ptr, size_t bytes, bool write) {
    if (empty() || bytes == 0) return CudaStatus::Ok();
    MutexLock lock(mu_);
    Mirror* m = FindLocked(ptr);
    if (m == nullptr) return CudaStatus::Ok();
    size_t first = (ptr - m->base) / kPage;
    size_t last = std::min(m->state.size(), (ptr - m->base + bytes + kPage - 1) / kPage);
    FLYT_CUDA_RETURN_IF_ERROR(FetchLocked(*m, first, last));
    if (write) {
      std::fill(m->state.begin() + first, m->state.begin() + last, kDirty);
      ::mprotect(reinterpret_cast<void*>(m->base + first * kPage), (last - first) * kPage,
                 PROT_READ | PROT_WRITE);
    }
    return CudaStatus::Ok();
  }

  // The SIGSEGV handler's part: true when the fault was in a mirror and is dealt with.
  bool OnFault(uint64_t address) {
    bool in_mirror = false;
    for (const Slot& s : slots_) {
      if (address >= s.base.load() && address < s.end.load()) {
        in_mirror = true;
        break;
      }
    }
    if (!in_mirror) return false;
    MutexLock lock(mu_);
    Mirror* m = FindLocked(address);
    if (m == nullptr) return false;
    size_t page = (address - m->base) / kPage;
    switch (m->state[page]) {
      case kStale: {
        m->readahead = page == m->next_fault_page
                           ? std::min(kMaxReadaheadPages, m->readahead * 2) : 1;
        size_t last = std::min(m->state.size(), page + m->readahead);
        CudaStatus s = FetchLocked(*m, page, last);
        m->next_fault_page = last;
        if (!s.ok()) {
          // The bytes cannot come: the page stays as it was in the mirror, readable, and the
          // program's next CUDA call reports the lost connection.
          Runtime::Get().ReportFailure(s);
          for (size_t p = page; p < last; ++p) m->state[p] = kClean;
          ::mprotect(reinterpret_cast<void*>(m->base + page * kPage), (last - page) * kPage,
                     PROT_READ);
        }
        return true;
      }
      case kClean:
        m->state[page] = kDirty;
        ::mprotect(reinterpret_cast<void*>(m->base + page * kPage), kPage,
                   PROT_READ | PROT_WRITE);
        return true;
      case kDirty:
        return true;  // another thread made it writable meanwhile
    }
    return false;
  }

  // cudaMemAdvise / prefetch records; cudaMemRangeGetAttribute reads.
  template <typename Fn>
  bool WithMirror(uint64_t ptr, size_t bytes, Fn&& fn) {
    if (empty()) return false;
    MutexLock lock(mu_);
    Mirror* m = FindLocked(ptr);
    if (m == nullptr || bytes > m->base + m->bytes - ptr) return false;
    fn(*m);
    return true;
  }

  // The __managed__ variables whose mirrors are placed (by their host pointer's address).
  bool VarPlaced(void** host_var_ptr) FLYT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return placed_vars_.contains(host_var_ptr);
  }
  void MarkVarPlaced(void** host_var_ptr) FLYT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    placed_vars_.insert(host_var_ptr);
  }

 private:
  ManagedSpace() = default;

  static void Drop(Mirror& m) {
    if (m.fd >= 0) ::close(m.fd);
    m.fd = -1;
  }

  void Unlink(Mirror& m) FLYT_REQUIRES(mu_) {
    for (Slot& s : slots_) {
      if (s.base.load() == m.base && s.end.load() != 0) {
        s.end.store(0);
        s.base.store(0);
      }
    }
    ::munmap(reinterpret_cast<void*>(m.base), m.mapped);
    ::munmap(m.internal, m.mapped);
    Drop(m);
    count_.fetch_sub(1, std::memory_order_release);
  }

  Mirror* FindLocked(uint64_t address) FLYT_REQUIRES(mu_) {
    auto it = mirrors_.upper_bound(address);
    if (it == mirrors_.begin()) return nullptr;
    --it;
    if (address - it->first >= it->second->mapped) return nullptr;
    return it->second.get();
  }

  // Calls fn(offset, bytes) for each device-backed piece of the mirror's [begin, end).
  template <typename Fn>
  static CudaStatus ForBacked(const Mirror& m, size_t begin, size_t end, Fn&& fn) {
    if (m.ranges.empty()) {
      size_t n = std::min(end, m.bytes) - std::min(begin, m.bytes);
      return n == 0 ? CudaStatus::Ok() : fn(begin, n);
    }
    for (const auto& [offset, bytes] : m.ranges) {
      size_t lo = std::max(begin, offset);
      size_t hi = std::min(end, offset + bytes);
      if (lo < hi) FLYT_CUDA_RETURN_IF_ERROR(fn(lo, hi - lo));
    }
    return CudaStatus::Ok();
  }

  CudaStatus PushLocked(Mirror& m, uint64_t stream, uint64_t lo, uint64_t hi)
      FLYT_REQUIRES(mu_) {
    size_t first = lo > m.base ? (lo - m.base) / kPage : 0;
    size_t last = hi >= m.base + m.mapped ? m.state.size()
                                          : std::min(m.state.size(), (hi - m.base + kPage - 1) / kPage);
    remote::Connection* conn = nullptr;
    for (size_t p = first; p < last;) {
      if (m.state[p] != kDirty) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < last && m.state[q] == kDirty) m.state[q++] = kClean;
      // Read-only first: a write from here on faults and is recorded again.
      ::mprotect(reinterpret_cast<void*>(m.base + p * kPage), (q - p) * kPage, PROT_READ);
      if (conn == nullptr) {
        FLYT_CUDA_ASSIGN_OR_RETURN(conn, Runtime::Get().Connection());
      }
      FLYT_CUDA_RETURN_IF_ERROR(ForBacked(m, p * kPage, q * kPage, [&](size_t off, size_t n) {
        return conn->MemcpyHtoDAsync({m.base + off, n, stream},
                                     std::span<const std::byte>(m.internal + off, n));
      }));
      p = q;
    }
    return CudaStatus::Ok();
  }

  // Fetches the stale pages of [first, last) and leaves them kClean, read-only.
  CudaStatus FetchLocked(Mirror& m, size_t first, size_t last) FLYT_REQUIRES(mu_) {
    for (size_t p = first; p < last;) {
      if (m.state[p] != kStale) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < last && m.state[q] == kStale) ++q;
      size_t off = p * kPage;
      FLYT_CUDA_RETURN_IF_ERROR(ForBacked(m, off, q * kPage, [&](size_t at, size_t n) {
        FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, Runtime::Get().Connection());
        return conn->MemcpyDtoH({m.base + at, n, 0}, std::span<std::byte>(m.internal + at, n))
            .status();
      }));
      std::fill(m.state.begin() + p, m.state.begin() + q, kClean);
      ::mprotect(reinterpret_cast<void*>(m.base + off), (q - p) * kPage, PROT_READ);
      p = q;
    }
    return CudaStatus::Ok();
  }

  static void Handler(int sig, siginfo_t* info, void* context);
  void InstallHandler() {
    bool expected = false;
    if (!installed_.compare_exchange_strong(expected, true)) return;
    // The program's handler is read before flyt's is installed, so that a fault on another
    // thread in between never finds previous_ empty. SA_ONSTACK: a program (or language runtime)
    // that handles stack overflow on an alternate stack still gets its guard-page faults there.
    ::sigaction(SIGSEGV, nullptr, &previous_);
    struct sigaction action {};
    action.sa_sigaction = &ManagedSpace::Handler;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGSEGV, &action, nullptr);
  }

  Mutex mu_;
  std::map<uint64_t, std::unique_ptr<Mirror>> mirrors_ FLYT_GUARDED_BY(mu_);
  std::set<void**> placed_vars_ FLYT_GUARDED_BY(mu_);
  std::array<Slot, kSlots> slots_;
  std::atomic<size_t> count_{0};
  std::atomic<bool> installed_{false};
  struct sigaction previous_ {};
};

void ManagedSpace::Handler(int sig, siginfo_t* info, void* context) {
  ManagedSpace& space = Get();
  if (info != nullptr && info->si_code > 0 &&
      space.OnFault(reinterpret_cast<uint64_t>(info->si_addr))) {
    return;
  }
  const struct sigaction& prev = space.previous_;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // The default action: a fault re-executes and kills the process; a sent signal is re-raised.
  ::signal(sig, SIG_DFL);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

// __managed__ variables registered, by fatbin handle.
struct ManagedVar {
  void** host_var_ptr = nullptr;
  std::string name;
  size_t size = 0;
};
Mutex vars_mu;
std::multimap<void**, ManagedVar>& Vars() FLYT_REQUIRES(vars_mu) {
  static auto* vars = new std::multimap<void**, ManagedVar>();
  return *vars;
}

CudaResult<int> DeviceOfLocation(cudaMemLocation location) {
  switch (location.type) {
    case cudaMemLocationTypeDevice:
      if (location.id != 0) return Error(CudaError::kInvalidDevice, "no such device");
      return 0;
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent:
      return -1;
    default:
      return Error(CudaError::kInvalidValue, "unknown memory location type");
  }
}

}  // namespace

// ---- Runtime's managed hooks ----------------------------------------------------------------

CudaStatus Runtime::ManagedBeforeLaunch(uint64_t stream_id) {
  ManagedSpace& space = ManagedSpace::Get();
  if (space.empty()) return CudaStatus::Ok();
  FLYT_CUDA_RETURN_IF_ERROR(space.Push(stream_id));
  space.Invalidate();
  return CudaStatus::Ok();
}

CudaStatus Runtime::ManagedBeforeCopy(const void* dst, const void* src, size_t bytes,
                                      bool dst_device, bool src_device, uint64_t stream_id) {
  ManagedSpace& space = ManagedSpace::Get();
  if (space.empty() || bytes == 0) return CudaStatus::Ok();
  if (dst_device || src_device) FLYT_CUDA_RETURN_IF_ERROR(space.Push(stream_id));
  if (src != nullptr && !src_device) {
    FLYT_CUDA_RETURN_IF_ERROR(space.HostUse(reinterpret_cast<uint64_t>(src), bytes, false));
  }
  if (dst != nullptr) {
    uint64_t d = reinterpret_cast<uint64_t>(dst);
    if (dst_device) {
      space.Invalidate(d, d + bytes);
    } else {
      FLYT_CUDA_RETURN_IF_ERROR(space.HostUse(d, bytes, true));
    }
  }
  return CudaStatus::Ok();
}

void Runtime::ManagedFree(const void* ptr) {
  ManagedSpace& space = ManagedSpace::Get();
  if (space.empty()) return;
  space.Destroy(reinterpret_cast<uint64_t>(ptr));
}

bool Runtime::ManagedPointerAttributes(const void* ptr, cudaPointerAttributes* attributes) {
  if (!ManagedSpace::Get().IsManaged(ptr)) return false;
  attributes->type = cudaMemoryTypeManaged;
  attributes->device = 0;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = const_cast<void*>(ptr);
  return true;
}

void Runtime::ManagedAdjustProperties(remote::GetDevicePropertiesReply& properties) {
  for (remote::NamedValue& v : properties.values) {
    if (v.name == "concurrentManagedAccess") v.value = 0;
    if (v.name == "managedMemory") v.value = 1;
  }
}

void Runtime::ManagedForgetAll() {
  ManagedSpace::Get().DestroyAll();
}

namespace {

// Allocates device memory for a new mirror and places the mirror at its address.
CudaResult<uint64_t> NewManaged(size_t bytes, unsigned flags) {
  Runtime& rt = Runtime::Get();
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, rt.Connection());
  ManagedSpace& space = ManagedSpace::Get();
  FLYT_CUDA_ASSIGN_OR_RETURN(std::unique_ptr<Mirror> m, space.Create(bytes));
  CudaResult<remote::MallocManagedReply> reply = conn->MallocManaged({bytes, m->base, flags});
  if (!reply.ok()) {
    ::munmap(reinterpret_cast<void*>(m->base), m->mapped);
    ::munmap(m->internal, m->mapped);
    ::close(m->fd);
    return reply.status();
  }
  if (CudaStatus placed = space.Place(*m, reply->ptr); !placed.ok()) {
    (void)conn->Free({reply->ptr});
    ::munmap(reinterpret_cast<void*>(m->base), m->mapped);
    ::munmap(m->internal, m->mapped);
    ::close(m->fd);
    return placed;
  }
  // The mirror starts zeroed; so does the device copy (CUDA leaves it undefined).
  FLYT_CUDA_RETURN_IF_ERROR(conn->Memset({reply->ptr, 0, bytes, 0}));
  uint64_t ptr = m->base;
  FLYT_CUDA_RETURN_IF_ERROR(space.Publish(std::move(m), kClean));
  rt.AddDeviceAllocation(ptr, bytes);
  return ptr;
}

}  // namespace

namespace {

// A __managed__ variable whose device copy the backend put where it chose (the driver packs a
// module's managed variables, unaligned, into shared pages).
struct PackedVar {
  ManagedVar var;
  uint64_t address = 0;
};

// One mirror over the pages of a group of packed variables whose pages touch; only the
// variables' own bytes move.
CudaStatus PlacePackedGroup(std::vector<PackedVar>::const_iterator first,
                            std::vector<PackedVar>::const_iterator last) {
  ManagedSpace& space = ManagedSpace::Get();
  uint64_t lo = first->address / kPage * kPage;
  uint64_t hi = lo;
  for (auto it = first; it != last; ++it) hi = std::max(hi, it->address + it->var.size);
  FLYT_CUDA_ASSIGN_OR_RETURN(std::unique_ptr<Mirror> m, space.Create(hi - lo));
  FLYT_CUDA_RETURN_IF_ERROR(space.Place(*m, lo));
  for (auto it = first; it != last; ++it) m->ranges.emplace_back(it->address - lo, it->var.size);
  m->variable = true;
  FLYT_CUDA_RETURN_IF_ERROR(space.Publish(std::move(m), kStale));
  for (auto it = first; it != last; ++it) {
    Runtime::Get().AddDeviceAllocation(it->address, it->var.size);
    *it->var.host_var_ptr = reinterpret_cast<void*>(it->address);
    space.MarkVarPlaced(it->var.host_var_ptr);
  }
  return CudaStatus::Ok();
}

CudaStatus InitManagedVars(void** handle) {
  Runtime& rt = Runtime::Get();
  std::vector<ManagedVar> vars;
  {
    MutexLock lock(vars_mu);
    auto [first, last] = Vars().equal_range(handle);
    for (auto it = first; it != last; ++it) vars.push_back(it->second);
  }
  ManagedSpace& space = ManagedSpace::Get();
  std::vector<PackedVar> packed;
  for (const ManagedVar& var : vars) {
    if (space.VarPlaced(var.host_var_ptr)) continue;
    // Loads the module and finds the variable (registered as an ordinary variable too).
    FLYT_CUDA_RETURN_IF_ERROR(rt.Symbol(var.host_var_ptr).status());
    FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, rt.Connection());
    FLYT_CUDA_ASSIGN_OR_RETURN(std::unique_ptr<Mirror> m, space.Create(var.size));
    auto* fatbin = static_cast<FatbinRecord*>(*handle);
    // The mirror's address is the hint: a backend that can place the variable there does (sim).
    FLYT_CUDA_ASSIGN_OR_RETURN(remote::ModuleGetManagedGlobalReply reply,
                               conn->ModuleGetManagedGlobal(
                                   {fatbin->module_id, var.name, var.size, m->base}));
    if (reply.ptr != m->base) {
      packed.push_back({var, reply.ptr});
      ::munmap(reinterpret_cast<void*>(m->base), m->mapped);
      ::munmap(m->internal, m->mapped);
      ::close(m->fd);
      continue;
    }
    m->variable = true;
    uint64_t ptr = m->base;
    FLYT_CUDA_RETURN_IF_ERROR(space.Publish(std::move(m), kStale));
    rt.AddDeviceAllocation(ptr, var.size);
    *var.host_var_ptr = reinterpret_cast<void*>(ptr);
    space.MarkVarPlaced(var.host_var_ptr);
  }
  std::sort(packed.begin(), packed.end(),
            [](const PackedVar& a, const PackedVar& b) { return a.address < b.address; });
  for (auto first = packed.begin(); first != packed.end();) {
    uint64_t end = first->address + first->var.size;
    auto last = first + 1;
    while (last != packed.end() && last->address / kPage * kPage < (end + kPage - 1) / kPage * kPage) {
      end = std::max(end, last->address + last->var.size);
      ++last;
    }
    FLYT_CUDA_RETURN_IF_ERROR(PlacePackedGroup(first, last));
    first = last;
  }
  return CudaStatus::Ok();
}

}  // namespace

char Runtime::ManagedInitModule(void** handle) {
  if (CudaStatus s = InitManagedVars(handle); !s.ok()) {
    (void)Get().Finish(s);
    return 0;
  }
  return 1;
}

}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace rt_impl = flyt::runtime;

extern "C" {

void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char*,
                              const char* deviceName, int, size_t size, int, int) noexcept {
  try {
    if (fatCubinHandle == nullptr || hostVarPtrAddress == nullptr || deviceName == nullptr) return;
    Runtime::Get().RegisterVar(fatCubinHandle, hostVarPtrAddress, deviceName, size, false);
    flyt::MutexLock lock(rt_impl::vars_mu);
    rt_impl::Vars().emplace(fatCubinHandle,
                            rt_impl::ManagedVar{hostVarPtrAddress, deviceName, size});
  } catch (...) {
  }
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) noexcept {
  return Guard("cudaMallocManaged", [&] {
    Runtime& rt = Runtime::Get();
    if (devPtr == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null devPtr"));
    *devPtr = nullptr;
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    if (size == 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "cudaMallocManaged of 0 bytes"));
    }
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue,
                                  "flags must be cudaMemAttachGlobal or cudaMemAttachHost"));
    }
    auto ptr = rt_impl::NewManaged(size, flags);
    if (!ptr.ok()) return rt.Finish(ptr.status());
    *devPtr = reinterpret_cast<void*>(*ptr);
    return cudaSuccess;
  });
}

cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, cudaMemLocation location,
                                 unsigned int flags, cudaStream_t stream) noexcept {
  return Guard("cudaMemPrefetchAsync", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    if (flags != 0) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "flags must be 0"));
    auto device = rt_impl::DeviceOfLocation(location);
    if (!device.ok()) return rt.Finish(device.status());
    auto id = rt.ResolveStream(stream, false);
    if (!id.ok()) return rt.Finish(id.status());
    uint64_t p = reinterpret_cast<uint64_t>(devPtr);
    auto& space = rt_impl::ManagedSpace::Get();
    if (!space.WithMirror(p, count, [&](rt_impl::Mirror& m) { m.last_prefetch = *device; })) {
      // Device memory prefetched to its own device: nothing to do, as with CUDA.
      if (rt.IsDeviceRange(devPtr, count)) return cudaSuccess;
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a managed range"));
    }
    if (count == 0) return cudaSuccess;
    if (*device == 0) return rt.Finish(space.Push(*id, p, p + count));
    // To the host: after the stream's earlier work, the pages come now.
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    cudaError_t synced = rt.FinishSync((*conn)->StreamSynchronize({*id}).status());
    if (synced != cudaSuccess) return synced;
    return rt.Finish(space.HostUse(p, count, false));
  });
}

cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count, cudaMemLocation location,
                                      unsigned int flags, cudaStream_t stream) noexcept {
  return cudaMemPrefetchAsync(devPtr, count, location, flags, stream);
}

cudaError_t cudaMemAdvise(const void* devPtr, size_t count, cudaMemoryAdvise advice,
                          cudaMemLocation location) noexcept {
  return Guard("cudaMemAdvise", [&] {
    Runtime& rt = Runtime::Get();
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "unknown advice"));
    }
    int device = -1;
    if (advice == cudaMemAdviseSetPreferredLocation || advice == cudaMemAdviseSetAccessedBy ||
        advice == cudaMemAdviseUnsetAccessedBy) {
      auto d = rt_impl::DeviceOfLocation(location);
      if (!d.ok()) return rt.Finish(d.status());
      device = *d;
    }
    bool ok = rt_impl::ManagedSpace::Get().WithMirror(
        reinterpret_cast<uint64_t>(devPtr), count, [&](rt_impl::Mirror& m) {
          switch (advice) {
            case cudaMemAdviseSetReadMostly: m.read_mostly = true; break;
            case cudaMemAdviseUnsetReadMostly: m.read_mostly = false; break;
            case cudaMemAdviseSetPreferredLocation: m.preferred = device; break;
            case cudaMemAdviseUnsetPreferredLocation: m.preferred = -2; break;
            case cudaMemAdviseSetAccessedBy: m.accessed_by = device == 0 || m.accessed_by; break;
            case cudaMemAdviseUnsetAccessedBy: if (device == 0) m.accessed_by = false; break;
            default: break;
          }
        });
    if (!ok || count == 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a managed range"));
    }
    return cudaSuccess;
  });
}

cudaError_t cudaMemRangeGetAttribute(void* data, size_t dataSize,
                                     cudaMemRangeAttribute attribute, const void* devPtr,
                                     size_t count) noexcept {
  return Guard("cudaMemRangeGetAttribute", [&] {
    Runtime& rt = Runtime::Get();
    if (data == nullptr || count == 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null data or empty range"));
    }
    cudaError_t result = cudaSuccess;
    bool found = rt_impl::ManagedSpace::Get().WithMirror(
        reinterpret_cast<uint64_t>(devPtr), count, [&](rt_impl::Mirror& m) {
          auto* out = static_cast<int*>(data);
          auto one = [&](int v) {
            if (dataSize != sizeof(int)) {
              result = cudaErrorInvalidValue;
              return;
            }
            *out = v;
          };
          auto type_of = [](int d) {
            return d == 0 ? cudaMemLocationTypeDevice
                          : d == -1 ? cudaMemLocationTypeHost : cudaMemLocationTypeInvalid;
          };
          switch (attribute) {
            case cudaMemRangeAttributeReadMostly: one(m.read_mostly ? 1 : 0); break;
            case cudaMemRangeAttributePreferredLocation: one(m.preferred); break;
            case cudaMemRangeAttributeLastPrefetchLocation: one(m.last_prefetch); break;
            case cudaMemRangeAttributePreferredLocationType: one(type_of(m.preferred)); break;
            case cudaMemRangeAttributePreferredLocationId: one(m.preferred == 0 ? 0 : 0); break;
            case cudaMemRangeAttributeLastPrefetchLocationType:
              one(type_of(m.last_prefetch));
              break;
            case cudaMemRangeAttributeLastPrefetchLocationId: one(0); break;
            case cudaMemRangeAttributeAccessedBy:
              if (dataSize == 0 || dataSize % sizeof(int) != 0) {
                result = cudaErrorInvalidValue;
                break;
              }
              for (size_t i = 0; i < dataSize / sizeof(int); ++i) out[i] = -2;
              if (m.accessed_by) out[0] = 0;
              break;
            default:
              result = cudaErrorInvalidValue;
          }
        });
    if (!found) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a managed range"));
    if (result != cudaSuccess) {
      return rt.Finish(CudaStatus(flyt::runtime::FromCuda(result), "bad attribute or data size"));
    }
    return cudaSuccess;
  });
}

cudaError_t cudaMemRangeGetAttributes(void** data, size_t* dataSizes,
                                      cudaMemRangeAttribute* attributes, size_t numAttributes,
                                      const void* devPtr, size_t count) noexcept {
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0) {
    return Runtime::Get().Finish(CudaStatus(CudaError::kInvalidValue, "null arrays"));
  }
  for (size_t i = 0; i < numAttributes; ++i) {
    cudaError_t e = cudaMemRangeGetAttribute(data[i], dataSizes[i], attributes[i], devPtr, count);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // extern "C"
