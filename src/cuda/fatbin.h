// Fatbin and cubin parsing: what kernels a CUDA binary holds and how their parameters are laid out.
//
// nvcc embeds device code in a host program as a fatbin container (magic 0xBA55ED50) reached
// through a wrapper struct (magic 0x466243B1) that the program hands to __cudaRegisterFatBinary.
// A container holds entries, each PTX text or a cubin (an ELF file) for one SM architecture,
// optionally compressed with LZ4 or zstd. The remote runtime needs, per kernel, the size and
// offset of each parameter so that it can copy a launch's `void** args` into one flat buffer; the
// server needs the container bytes to load the module. This library reads all of that without a
// GPU or a driver.
//
// Every function here is pure: it reads only the bytes it is given (bounded by their size, never
// past it), keeps no state and is safe to call from any thread. Hostile input yields an
// InvalidArgument Status, never a crash or an out-of-bounds read. The one exception is
// FatbinsOfWrapper, which must follow the raw pointers nvcc put in the wrapper of a program loaded
// in this process; it trusts those pointers as far as the program's own loader does.
//
// Layout facts this reader relies on (checked against nvcc 13.0 output, LZ4 included via
// -Xfatbin -compress-mode=speed):
//  * container: u32 magic, u16 version (1), u16 header size (16), u64 size of the entries;
//  * entry: u16 kind (1 PTX, 2 ELF; others such as 8 = LTO IR are skipped), u16 version,
//    u32 header size (64 + optional fields), u64 stored payload size (8-aligned), u32 compressed
//    size, u32 offset of the ptxas-options descriptor, u16 code version minor, major, u32 SM arch,
//    u32 offset and length of the object name, u64 flags (0x1 64-bit, 0x2 debug, 0x10 Linux,
//    0x2000 LZ4, 0x8000 zstd), u64 reserved, u64 decompressed size; the payload follows the header.
//  * A host program's .nv_fatbin section may hold several containers back to back (since CUDA 13
//    every program also carries the device-link step's container, usually without kernels).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flyt::cuda {

inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

// One entry of a fatbin container, decompressed.
struct FatbinEntry {
  enum class Kind { kPtx, kElf };
  Kind kind = Kind::kElf;
  uint32_t sm_arch = 0;            // e.g. 80 for sm_80
  bool was_compressed = false;     // LZ4 or zstd in the container
  std::string compression;         // "", "lz4" or "zstd"
  std::vector<std::byte> payload;  // PTX text (without the trailing NULs) or the cubin ELF

  uint64_t stored_size_bytes = 0;  // bytes the payload takes in the container (padding included)
  uint64_t flags = 0;              // the entry's flag word (see the layout notes above)
  uint16_t version_major = 0;      // PTX ISA version (9.0) or cubin code version (1.8)
  uint16_t version_minor = 0;
  std::string object_name;  // source object, when the entry names one (-G builds)
  std::string options;      // ptxas options recorded for the entry (e.g. "--compile-only")
};

struct Fatbin {
  size_t size_bytes = 0;  // length of the whole container, headers included
  std::vector<FatbinEntry> entries;
  uint32_t skipped_entries = 0;  // entries of kinds flyt does not read (LTO IR, ...)
};

struct KernelParam {
  uint32_t ordinal = 0;  // position in the C++ parameter list
  uint32_t offset = 0;   // byte offset in the parameter buffer
  uint32_t size_bytes = 0;
};

struct KernelInfo {
  std::string name;                 // mangled, as __cudaRegisterFunction names it
  uint32_t sm_arch = 0;             // of the entry it was read from
  bool from_ptx = false;            // layout read from the PTX .entry (no cubin for it)
  std::vector<KernelParam> params;  // sorted by ordinal
  uint32_t param_bytes = 0;         // size of the whole parameter buffer
  // Absent when the entry does not say (PTX-only kernels).
  std::optional<uint32_t> registers;
  // As ptxas reports it: without the 1 KiB that sm_90+ cubins reserve in .nv.shared.<kernel>.
  std::optional<uint32_t> static_shared_bytes;
  std::optional<uint32_t> max_threads_per_block;
  std::optional<uint32_t> const_bytes;  // constant bank 0 (.nv.constant0.<kernel>), params included
  std::optional<uint32_t> local_bytes;  // per-thread stack frame (EIATTR_FRAME_SIZE)
};

// The largest decompressed entry ParseFatbin accepts; a header claiming more is refused rather
// than trusted (no real cubin or PTX module comes near it).
inline constexpr uint64_t kMaxFatbinEntryBytes = uint64_t{256} << 20;

// Length of the container starting at `bytes` read from its headers (the runtime knows only a
// pointer). `bytes` must hold at least the container's 16-byte header.
[[nodiscard]] Result<size_t> FatbinSize(std::span<const std::byte> bytes);

// Parses a container; trailing bytes after it are ignored. Decompresses LZ4 (flag 0x2000) and
// zstd (flag 0x8000) entries.
[[nodiscard]] Result<Fatbin> ParseFatbin(std::span<const std::byte> bytes);

// The containers stored back to back in `bytes` (a host program's .nv_fatbin or __nv_relfatbin
// section, or a .fatbin file), each span exactly FatbinSize bytes. Zero padding between them is
// skipped; anything else is an error.
[[nodiscard]] Result<std::vector<std::span<const std::byte>>> SplitFatbins(
    std::span<const std::byte> bytes);

// Kernels of one cubin, with parameter layout from .nv.info.<kernel> and resources from the
// section headers / .nv.info attributes.
[[nodiscard]] Result<std::vector<KernelInfo>> ParseCubin(std::span<const std::byte> elf,
                                                         uint32_t sm_arch = 0);

// Kernels of a PTX module, laid out from each .entry's parameter list.
[[nodiscard]] Result<std::vector<KernelInfo>> ParsePtx(std::string_view ptx, uint32_t sm_arch = 0);

// Every kernel of a fatbin, one KernelInfo per (name, sm_arch) found; cubin layouts preferred,
// PTX used for kernels no cubin has.
[[nodiscard]] Result<std::vector<KernelInfo>> KernelsOf(const Fatbin& fatbin);

// The containers a registered wrapper refers to (the pointer __cudaRegisterFatBinary received):
// version 1 has one; version 2 (-rdc=true) may list several. Each span covers exactly one
// container (FatbinSize bytes).
//
// Version 2 is the device-link wrapper (__fatDeviceText from crt/link.stub): `data` points at
// the container of the device-linked cubins (.nv_fatbin), and `filename_or_fatbins` at a
// NULL-terminated array (__cudaPrelinkedFatbins) of pointers to each translation unit's
// relocatable container (__nv_relfatbin), which the link stub fills before it registers the
// wrapper. The result lists the linked container first (what the driver loads: it has every
// kernel), then the relocatable ones in array order (their PTX is what a JIT link would need).
[[nodiscard]] Result<std::vector<std::span<const std::byte>>> FatbinsOfWrapper(const void* wrapper);

}  // namespace flyt::cuda
