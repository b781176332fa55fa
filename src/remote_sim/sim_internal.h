// The simulated device's insides (sim_backend.h is its public face): the memory blocks, the
// session and the backend classes. Internal to src/remote: included only by the sim backend's own
// files — sim_backend.cc (memory, streams, events, modules, launches) and one file per later CUDA
// family (sim_graph.cc, sim_pool.cc, sim_array.cc, sim_managed.cc, sim_ipc.cc, sim_migration.cc), so
// that each family's state and methods sit beside the others' without one file growing past its
// seams. Device addresses are the backend's own (sim_address_space.h).
//
// Thread safety: as sim_backend.h says (a Session is used by one thread at a time; the backend's
// shared state is atomic or guarded).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "cuda/fatbin.h"
#include "remote/address_ranges.h"
#include "remote_sim/sim_address_space.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote::sim_internal {


// Device addresses come from the backend's address space (sim_address_space.h), which starts at
// 2^47: anything below is a host address (managed memory's aliases live there).
inline constexpr uint64_t kDeviceBase = SimAddressSpace::kBase;
inline constexpr size_t kAlignment = 256;  // cudaMalloc's guarantee
inline constexpr size_t kMmapThreshold = 256 << 10;
// Freed mappings a session keeps for its next allocations of the same rounded size, so that a
// cudaMalloc/cudaFree loop costs no mmap/munmap. Kept per session, never shared between clients
// (a reused block still holds its old bytes, as cudaMalloc memory may).
inline constexpr size_t kSpareBlockMaxBytes = 64 << 20;
inline constexpr size_t kSpareTotalBytes = 256 << 20;
inline constexpr const char* kFaultKernelMarker = "flyt_sim_fault";

// Attribute values of an H100 SXM5 80GB (cudaDeviceAttr numbers).
struct AttrValue {
  uint32_t attr;
  int32_t value;
};
inline constexpr AttrValue kH100Attributes[] = {
    {1, 1024},       {2, 1024},       {3, 1024},       {4, 64},          {5, 2147483647},
    {6, 65535},      {7, 65535},      {8, 49152},      {9, 65536},       {10, 32},
    {11, 2147483647}, {12, 65536},    {13, 1980000},   {14, 512},        {15, 1},
    {16, 132},       {17, 0},         {18, 0},         {19, 0},          {20, 0},
    {21, 131072},    {22, 131072},    {23, 65536},     {24, 16384},      {25, 16384},
    {26, 16384},     {27, 32768},     {28, 32768},     {29, 2048},       {30, 512},
    {31, 1},         {32, 1},         {33, 0x18},      {34, 0},          {35, 0},
    {36, 2619000},   {37, 5120},      {38, 52428800},  {39, 2048},       {40, 3},
    {41, 1},         {42, 32768},     {43, 2048},      {45, 32768},      {46, 32768},
    {47, 8192},      {48, 8192},      {49, 32768},     {50, 0},          {51, 32},
    {52, 32768},     {53, 32768},     {54, 2046},      {55, 32768},      {56, 131072},
    {57, 65536},     {58, 16384},     {59, 16384},     {60, 16384},      {61, 32768},
    {62, 2048},      {63, 32768},     {64, 32768},     {65, 2048},       {66, 32768},
    {67, 32768},     {68, 2046},      {69, 268435456}, {70, 131072},     {71, 65000},
    {72, 2097120},   {73, 32768},     {74, 32768},     {75, 9},          {76, 0},
    {77, 32768},     {78, 1},         {79, 1},         {80, 1},          {81, 233472},
    {82, 65536},     {83, 1},         {84, 0},         {85, 0},          {86, 0},
    // [issue 17: managed] 89 (concurrentManagedAccess) is 0: managed memory is emulated.
    {87, 2},         {88, 0},         {89, 0},         {90, 1},          {91, 0},
    {95, 1},         {97, 232448},    {98, 0},         {99, 1},          {100, 0},
    {101, 0},        {106, 32},       {108, 82837504}, {109, 134213632}, {111, 1024},
    {112, 1},        {113, 1},        {114, 1},        {115, 1},         {116, 1},
    {117, 1},        {118, 100},      {119, 9},        {120, 1},         {121, 1},
    {125, 1},        {126, 4},        {127, 1},        {128, 0},         {129, 1},
    {130, 0},        {131, -1},       {133, 0},        {134, -1},        {139, 0x233010de},
    {140, 0x16c110de}, {143, 0},
};

// One block of simulated device memory: host memory (heap or a mapping) and a device address from
// the backend's address space, given back when the block goes.
class Block {
 public:
  // `bytes` of fresh memory. `space` null: no device address (an array's memory, which no pointer
  // names). `address` 0: an address from `space`; else one the caller has reserved in `space`
  // already (Session::MallocAt), which the block now owns.
  Block(size_t bytes, SimAddressSpace* space, DevicePtr address = 0)
      : bytes_(bytes), space_(space), space_bytes_(bytes), address_(address) {
    if (space_ != nullptr && address_ == 0) {
      std::optional<uint64_t> at = space_->Allocate(space_bytes_);
      if (!at) {
        space_ = nullptr;  // nothing to give back
        no_address_ = true;
        return;
      }
      address_ = *at;
    }
    Allocate();
  }
  // A block over a mapping made elsewhere (an opened IPC handle, sim_ipc.cc): owns the mapping
  // and `fd` (-1: none); its device address is a fresh one from `space`.
  Block(std::byte* mapping, size_t mapped, size_t bytes, int fd, SimAddressSpace* space)
      : data_(mapping), bytes_(bytes), mapped_(mapped), fd_(fd), space_(space),
        space_bytes_(bytes) {
    std::optional<uint64_t> at = space_->Allocate(space_bytes_);
    if (at) {
      address_ = *at;
    } else {
      space_ = nullptr;
      no_address_ = true;
    }
  }
  ~Block() {
    if (mapped_ != 0) {
      ::munmap(data_, mapped_);
    } else {
      std::free(data_);
    }
    if (fd_ >= 0) ::close(fd_);
    if (space_ != nullptr) space_->Release(address_, space_bytes_);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Whether it has its memory, and the device address it was to have.
  bool ok() const { return data_ != nullptr && !no_address_; }
  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // The mapping's size, 0 for a heap block.
  size_t mapped() const { return mapped_; }
  // Takes the block for a new allocation of `bytes` (no more than its mapping holds). The device
  // range it holds stays as it was made.
  void Reuse(size_t bytes) { bytes_ = bytes; }
  // Its device address: fixed when it is made, whatever backs it later.
  DevicePtr address() const { return address_; }
  // The device range it holds in the address space: [address(), address() + space_bytes()).
  uint64_t space_bytes() const { return SimAddressSpace::Extent(space_bytes_); }
  // Interprocess sharing (sim_ipc.cc): the memfd its bytes live in once shared, else -1. A shared
  // block is never reused for another allocation.
  int shared_fd() const { return fd_; }
  // Moves the bytes into a sealed memfd named `name` (once), keeping the device address.
  bool Share(const std::string& name);

 private:
  void Allocate() {
    size_t rounded = (std::max<size_t>(bytes_, 1) + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded >= kMmapThreshold) {
      void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<std::byte*>(p);
        mapped_ = rounded;
      }
    } else {
      data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
      if (data_) std::memset(data_, 0, rounded);
    }
  }

  std::byte* data_ = nullptr;
  size_t bytes_;
  size_t mapped_ = 0;
  int fd_ = -1;
  // The address space the device range is given back to (null: none held), and the size it was
  // taken with.
  SimAddressSpace* space_ = nullptr;
  size_t space_bytes_ = 0;
  DevicePtr address_ = 0;
  bool no_address_ = false;  // the space had no room for it
};

inline CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

class SimBackend;

class SimSession final : public Session {
 public:
  SimSession(SimBackend& backend, std::string label) : backend_(backend), label_(std::move(label)) {}
  ~SimSession() override;

  CudaResult<DevicePtr> Malloc(uint64_t bytes) override;
  CudaStatus Free(DevicePtr ptr) override;
  CudaResult<MemoryInfo> MemGetInfo() override;
  CudaStatus MemcpyHtoD(DevicePtr dst, std::span<const std::byte> src,
                        StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
    FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * p, Translate(dst, src.size()));
    std::memcpy(p, src.data(), src.size());
    return CudaStatus::Ok();
  }
  CudaStatus MemcpyDtoH(std::span<std::byte> dst, DevicePtr src, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
    FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * p, Translate(src, dst.size()));
    std::memcpy(dst.data(), p, dst.size());
    return CudaStatus::Ok();
  }
  CudaStatus MemcpyDtoHAsync(std::byte* dst, DevicePtr src, uint64_t bytes,
                             StreamHandle stream) override {
    return MemcpyDtoH(std::span<std::byte>(dst, bytes), src, stream);
  }
  CudaStatus MemcpyDtoD(DevicePtr dst, DevicePtr src, uint64_t bytes,
                        StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
    FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * d, Translate(dst, bytes));
    FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * s, Translate(src, bytes));
    std::memmove(d, s, bytes);
    return CudaStatus::Ok();
  }
  CudaStatus Memset(DevicePtr dst, uint8_t value, uint64_t bytes, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
    FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * d, Translate(dst, bytes));
    std::memset(d, value, bytes);
    return CudaStatus::Ok();
  }

  std::byte* HostView(DevicePtr ptr, uint64_t bytes) override;

  CudaResult<StreamHandle> StreamCreate(uint32_t flags, int32_t priority) override;
  CudaStatus StreamDestroy(StreamHandle stream) override;
  CudaStatus StreamSynchronize(StreamHandle stream) override { return CheckStream(stream); }
  CudaStatus StreamQuery(StreamHandle stream) override { return CheckStream(stream); }
  CudaStatus StreamWaitEvent(StreamHandle stream, EventHandle event, uint32_t flags) override;

  CudaResult<EventHandle> EventCreate(uint32_t flags) override;
  CudaStatus EventDestroy(EventHandle event) override;
  CudaStatus EventRecord(EventHandle event, StreamHandle stream) override;
  CudaStatus EventSynchronize(EventHandle event) override {
    if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
    return FindEvent(event).status();
  }
  CudaStatus EventQuery(EventHandle event) override {
    if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
    return FindEvent(event).status();
  }
  CudaResult<float> EventElapsedMs(EventHandle start, EventHandle end) override;

  CudaStatus DeviceSynchronize() override { return Sticky(); }
  CudaStatus Reset() override;

  CudaResult<ModuleHandle> ModuleLoad(std::span<const std::byte> image) override;
  CudaStatus ModuleUnload(ModuleHandle module) override;
  CudaResult<FunctionHandle> ModuleGetFunction(ModuleHandle module,
                                               const std::string& name) override;
  CudaResult<GlobalSymbol> ModuleGetGlobal(ModuleHandle module, const std::string& name,
                                           uint64_t registered_bytes) override;
  CudaResult<int32_t> FuncGetAttribute(FunctionHandle function, FunctionAttribute attr) override;
  CudaStatus FuncSetAttribute(FunctionHandle function, FunctionAttribute attr,
                              int32_t value) override;
  CudaResult<int32_t> OccupancyMaxActiveBlocksPerSm(FunctionHandle function, int32_t block_size,
                                                    uint64_t dynamic_shared_bytes,
                                                    uint32_t flags) override;
  CudaStatus LaunchKernel(FunctionHandle function, const LaunchConfig& config,
                          std::span<const std::byte> params) override;

  // [issue 17: graphs] overrides (defined in sim_<family>.cc)
  CudaResult<uint64_t> GraphInstantiate(std::span<const GraphNodeSpec> nodes) override;
  CudaStatus GraphUpdate(uint64_t exec, std::span<const GraphNodeSpec> nodes) override;
  CudaStatus GraphLaunch(uint64_t exec, StreamHandle stream) override;
  CudaStatus GraphDestroy(uint64_t exec) override;
  // (end graphs)

  // [issue 17: pools] overrides (defined in sim_<family>.cc)
  CudaStatus LaunchKernelEx(FunctionHandle function, const LaunchConfig& config,
                            const LaunchAttributes& attributes,
                            std::span<const std::byte> params) override;
  // (end pools)

  // [issue 17: arrays] overrides (defined in sim_<family>.cc)
  CudaResult<uint64_t> ArrayCreate(const ArraySpec& spec) override;
  CudaStatus ArrayDestroy(uint64_t array) override;
  CudaResult<uint64_t> MipmappedArrayCreate(const ArraySpec& spec, uint32_t levels) override;
  CudaResult<uint64_t> MipmappedArrayLevel(uint64_t mipmap, uint32_t level) override;
  CudaStatus MipmappedArrayDestroy(uint64_t mipmap) override;
  CudaStatus Memcpy3D(const Copy3DSpec& copy, StreamHandle stream) override;
  CudaResult<uint64_t> TextureCreate(const ResourceSpec& resource, const TextureSpec& texture,
                                     const ViewSpec* view) override;
  CudaStatus TextureDestroy(uint64_t value) override;
  CudaResult<uint64_t> SurfaceCreate(const ResourceSpec& resource) override;
  CudaStatus SurfaceDestroy(uint64_t value) override;
  // What the arrays tests look at: the descriptors a texture object was made with.
  const TextureSpec* FindTexture(uint64_t value) const {
    auto it = textures_.find(value);
    return it == textures_.end() ? nullptr : &it->second.texture;
  }
  // (end arrays)

  // [issue 17: managed] overrides (defined in sim_<family>.cc)
  CudaResult<DevicePtr> MallocManaged(uint64_t bytes, uint64_t address_hint) override;
  CudaResult<GlobalSymbol> ModuleGetManagedGlobal(ModuleHandle module, const std::string& name,
                                                  uint64_t registered_bytes,
                                                  uint64_t address_hint) override;
  // (end managed)

  // Interprocess memory and events (sim_ipc.cc).
  CudaResult<std::vector<std::byte>> IpcGetMemHandle(DevicePtr base) override;
  CudaResult<std::pair<DevicePtr, uint64_t>> IpcOpenMemHandle(
      const std::vector<std::byte>& handle) override;
  CudaStatus IpcCloseMemHandle(DevicePtr ptr) override;
  CudaResult<std::vector<std::byte>> IpcGetEventHandle(EventHandle event) override;
  CudaResult<EventHandle> IpcOpenEventHandle(const std::vector<std::byte>& handle) override;

  // Live migration (sim_migration.cc): memory and globals at the addresses they had on another
  // server, taken from this backend's address space.
  CudaResult<DevicePtr> MallocAt(DevicePtr address, uint64_t bytes) override;
  CudaResult<GlobalSymbol> ModuleGetGlobalAt(ModuleHandle module, const std::string& name,
                                             uint64_t registered_bytes, DevicePtr address) override;
  bool CanPlaceMemory() const override { return true; }

  // Resizing: every call boundary is a clean point (nothing runs on a simulated device), so the
  // new share holds at once: GrantedSmCount's rounding in steps of the sim's granularity.
  CudaStatus ApplySmShare(int sm_count, int* granted) override;

 private:
  struct Event {
    uint32_t flags = 0;
    std::optional<std::chrono::steady_clock::time_point> recorded;
  };
  struct Module {
    std::map<std::string, cuda::KernelInfo> kernels;
    std::map<std::string, std::unique_ptr<Block>> globals;
  };
  struct Function {
    uint64_t module = 0;
    cuda::KernelInfo info;
    int32_t max_dynamic_shared = 0;
    int32_t carveout = -1;
  };

  CudaStatus CheckStream(StreamHandle stream) const {
    if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
    if (stream == kDefaultStream || streams_.contains(static_cast<uint64_t>(stream))) {
      return CudaStatus::Ok();
    }
    return Error(CudaError::kInvalidResourceHandle, "unknown stream");
  }
  CudaResult<Event*> FindEvent(EventHandle event) {
    auto it = events_.find(static_cast<uint64_t>(event));
    if (it == events_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown event");
    return &it->second;
  }
  CudaResult<Function*> FindFunction(FunctionHandle function) {
    auto it = functions_.find(static_cast<uint64_t>(function));
    if (it == functions_.end()) {
      return Error(CudaError::kInvalidDeviceFunction, "unknown function");
    }
    return &it->second;
  }
  CudaResult<std::byte*> Translate(DevicePtr ptr, uint64_t bytes) const {
    std::optional<AddressRanges<Block*>::Range> range = ranges_.Find(ptr);
    if (!range || bytes > range->size - (ptr - range->base)) {
      return Error(CudaError::kInvalidValue, "address range not in simulated device memory");
    }
    return range->value->data() + (ptr - range->base);
  }
  static int32_t DefaultMaxDynamicShared(const cuda::KernelInfo& info) {
    return 49152 - static_cast<int32_t>(info.static_shared_bytes.value_or(0));
  }

  SimBackend& backend_;
  std::string label_;
  uint64_t next_handle_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Block>> allocations_;
  std::multimap<size_t, std::unique_ptr<Block>> spare_;  // by mapping size
  size_t spare_bytes_ = 0;
  AddressRanges<Block*> ranges_;  // allocations and globals
  std::unordered_map<uint64_t, uint32_t> streams_;
  std::unordered_map<uint64_t, Event> events_;
  std::unordered_map<uint64_t, Module> modules_;
  std::unordered_map<uint64_t, Function> functions_;
  std::unordered_map<uint64_t, std::unique_ptr<Block>> ipc_imports_;  // by device address
  uint64_t launches_ = 0;
  // Drops the spare blocks whose device range overlaps [address, address + bytes), giving their
  // addresses back; whether there was any (sim_migration.cc).
  bool DropSpares(uint64_t address, uint64_t bytes);
  // The session's own fault, else the process's (SimOptions::fault_poisons_process).
  CudaStatus Sticky() const;

  // Set by a launch of a fault-injection kernel (see sim_backend.h); like a corrupted context,
  // every later device operation reports it until Reset.
  CudaStatus sticky_;

  // [issue 17: graphs] session state
  // Instantiated graphs: a launch runs their nodes in order (kernels recorded as launches,
  // copies and memsets byte-exact).
  struct SimGraph {
    std::vector<GraphNodeSpec> nodes;
    std::vector<uint64_t> functions;  // distinct, checked once per launch
    uint64_t kernels = 0;
    bool faults = false;  // a kernel node is a fault-injection kernel
  };
  CudaResult<SimGraph> CheckGraph(std::span<const GraphNodeSpec> nodes);
  std::unordered_map<uint64_t, SimGraph> graph_execs_;
  // (end graphs)

  // [issue 17: pools] session state
  // (end pools)

  // [issue 17: arrays] session state
  // An array is a block of host memory laid out densely (rows of row_bytes, slices of rows);
  // its bytes are reserved on the backend for as long as it lives (released by ~SimArray).
  struct SimArray {
    SimArray(SimBackend& backend, const ArraySpec& s);
    ~SimArray();
    SimArray(const SimArray&) = delete;
    SimArray& operator=(const SimArray&) = delete;
    SimBackend& backend;
    ArraySpec spec;
    uint64_t bytes = 0;
    bool reserved = false;
    std::unique_ptr<Block> block;
    uint64_t mipmap = 0;  // the mipmapped array that owns this level, 0 for a plain array
  };
  struct SimMipmap {
    ArraySpec spec;
    std::vector<uint64_t> levels;  // array handles, level 0 first
  };
  struct SimTexture {
    ResourceSpec resource;
    TextureSpec texture;
    std::optional<ViewSpec> view;
  };
  CudaResult<std::unique_ptr<SimArray>> NewArray(const ArraySpec& spec);
  CudaStatus CheckResource(const ResourceSpec& resource) const;
  // The first byte, row pitch and slice pitch of one end of a copy, after checking its bounds.
  struct Plane {
    std::byte* base = nullptr;
    uint64_t pitch = 0;
    uint64_t slice = 0;
  };
  CudaResult<Plane> ResolveEnd(const CopyEndSpec& end, const Copy3DSpec& copy) const;
  std::unordered_map<uint64_t, std::unique_ptr<SimArray>> arrays_;
  std::unordered_map<uint64_t, SimMipmap> mipmaps_;
  std::unordered_map<uint64_t, SimTexture> textures_;
  std::unordered_map<uint64_t, ResourceSpec> surfaces_;
  // (end arrays)

  // [issue 17: managed] session state
  // Whether [address, address + bytes) can be a new range: a host address (below kDeviceBase),
  // aligned, overlapping nothing the session holds.
  bool ManagedAddressFree(uint64_t address, uint64_t bytes) const;
  // Aliases of __managed__ globals at their host mirrors' addresses, by module.
  std::multimap<uint64_t, uint64_t> managed_aliases_;
  // Removes a module's aliases (ModuleUnload).
  void ForgetManagedAliases(uint64_t module);
  // (end managed)

};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(SimOptions options)
      : options_(std::move(options)),
        address_space_(SimAddressSpace::kBase, SimAddressSpace::kSize, RandomOrigin()) {
    for (const AttrValue& a : kH100Attributes) attributes_[a.attr] = a.value;
    granted_sm_count_ = options_.sm_share ? GrantedSmCount(*options_.sm_share, options_.sm_count,
                                                           options_.sm_granularity)
                                          : options_.sm_count;
    attributes_[16] = granted_sm_count_;
    share_asked_ = options_.sm_share.value_or(0);
  }

  std::string Name() const override { return "sim"; }
  std::string Describe() const override {
    std::string share;
    if (share_asked_.load() != 0) {
      share = " (each client gets " + std::to_string(granted_sm_count_.load()) + ": asked " +
              std::to_string(share_asked_.load()) + ", granted in steps of " +
              std::to_string(options_.sm_granularity) + ")";
    }
    return "SIMULATED device (no GPU): " + options_.name + ", " +
           std::to_string(options_.sm_count) + " SMs" + share + ", " +
           std::to_string(options_.memory_bytes >> 20) +
           " MiB; kernels are recorded, not executed";
  }
  DeviceIdentity Identity() const override {
    DeviceIdentity id;
    id.name = options_.name;
    // A fixed, recognisable UUID: "flyt-sim" then zeros and the SM count.
    const char tag[] = "flyt-sim";
    std::memcpy(id.uuid.data(), tag, 8);
    id.uuid[15] = static_cast<uint8_t>(options_.sm_count);
    id.total_memory_bytes = options_.memory_bytes;
    id.driver_version = 13000;
    id.simulated = true;
    id.sm_count_total = options_.sm_count;
    id.sm_count_granted = granted_sm_count_.load();
    id.sm_granularity = options_.sm_granularity;
    return id;
  }
  CudaResult<int32_t> DeviceAttribute(uint32_t attr) const override {
    if (attr == 16) return int32_t{granted_sm_count_.load()};  // multiProcessorCount: the share
    auto it = attributes_.find(attr);
    if (it == attributes_.end()) {
      return Error(CudaError::kInvalidValue, "unknown device attribute " + std::to_string(attr));
    }
    return it->second;
  }
  CudaResult<std::unique_ptr<Session>> OpenSession(const std::string& label) override {
    return std::unique_ptr<Session>(std::make_unique<SimSession>(*this, label));
  }

  // The device addresses of this backend's blocks (sim_address_space.h). Allocation starts at a
  // random 2 MiB boundary in the space's lower half: each backend (with a process per client, each
  // client's) hands out addresses of its own, as each process's host addresses differ.
  static uint64_t RandomOrigin() {
    std::random_device random;
    const uint64_t r = (uint64_t{random()} << 32) | random();
    const uint64_t slots = SimAddressSpace::kSize / 2 / SimAddressSpace::kLargeAlignment;
    return SimAddressSpace::kBase + r % slots * SimAddressSpace::kLargeAlignment;
  }
  SimAddressSpace& address_space() { return address_space_; }

  bool Reserve(uint64_t bytes) {
    uint64_t used = used_.load();
    while (true) {
      if (bytes > options_.memory_bytes || used > options_.memory_bytes - bytes) return false;
      if (used_.compare_exchange_weak(used, used + bytes)) return true;
    }
  }
  void Release(uint64_t bytes) { used_.fetch_sub(bytes); }
  uint64_t used() const { return used_.load(); }
  const SimOptions& options() const { return options_; }
  // The share a session of this backend was resized to last: what Identity and the backend's own
  // multiProcessorCount report from now on (with a thread per client, sessions that have not
  // applied it yet still run with their own, which the server reports to their clients).
  void NoteSmShare(int asked, int granted) {
    share_asked_.store(asked);
    granted_sm_count_.store(granted);
  }
  int32_t Attr(uint32_t attr) const { return attributes_.at(attr); }

  // A fault that corrupts the whole process's device state (fault_poisons_process).
  void Poison(const CudaStatus& fault) {
    if (!options_.fault_poisons_process) return;
    MutexLock lock(poison_mu_);
    if (!poisoned_.load()) poison_ = fault;
    poisoned_.store(true);
  }
  CudaStatus Poisoned() const {
    if (!poisoned_.load()) return CudaStatus::Ok();
    MutexLock lock(poison_mu_);
    return poison_;
  }

 private:
  mutable Mutex poison_mu_;
  std::atomic<bool> poisoned_{false};
  CudaStatus poison_ FLYT_GUARDED_BY(poison_mu_);
  const SimOptions options_;
  std::map<uint32_t, int32_t> attributes_;
  std::atomic<int> granted_sm_count_{0};
  std::atomic<int> share_asked_{0};  // 0: no share (every SM)
  std::atomic<uint64_t> used_{0};
  SimAddressSpace address_space_;
};

}  // namespace flyt::remote::sim_internal
