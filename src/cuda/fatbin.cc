// Fatbin containers: headers, entries, decompression, and the registration wrapper.
#include "cuda/fatbin.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "cuda/bytes.h"

// The fuzz build lowers the cap so that a decompression bomb costs milliseconds, not seconds.
#ifndef FLYT_CUDA_MAX_ENTRY_BYTES
#define FLYT_CUDA_MAX_ENTRY_BYTES ::flyt::cuda::kMaxFatbinEntryBytes
#endif

namespace flyt::cuda {
namespace {

using internal::CheckedAdd;
using internal::Hex;
using internal::InRange;
using internal::Load;

constexpr uint64_t kContainerHeaderBytes = 16;
constexpr uint64_t kEntryHeaderBytes = 64;  // the fixed part; newer entries append fields
constexpr uint16_t kEntryKindPtx = 1;
constexpr uint16_t kEntryKindElf = 2;
constexpr uint64_t kFlagLz4 = 0x2000;
constexpr uint64_t kFlagZstd = 0x8000;
// No container nvcc writes comes near this; a header claiming more is corrupt.
constexpr uint64_t kMaxContainerBytes = uint64_t{4} << 30;
// LZ4 cannot expand data by more than this factor (one token byte per 255 run-length bytes).
constexpr uint64_t kLz4MaxRatio = 255;
// A registration wrapper's prelinked list longer than this is not a list nvlink wrote.
constexpr size_t kMaxPrelinkedFatbins = 1 << 16;

constexpr uint64_t MaxEntryBytes() { return FLYT_CUDA_MAX_ENTRY_BYTES; }

std::string EntryWhere(size_t index, uint64_t offset) {
  return "fatbin entry " + std::to_string(index) + " at offset " + Hex(offset);
}

Result<std::vector<std::byte>> DecompressLz4(std::span<const std::byte> in, uint64_t out_bytes,
                                             const std::string& where) {
  if (in.size() > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE) ||
      out_bytes > static_cast<uint64_t>(INT32_MAX)) {
    return InvalidArgument(where + ": LZ4 payload too large");
  }
  uint64_t bound = 0;
  if (!internal::CheckedMul(in.size(), kLz4MaxRatio, &bound) || out_bytes > bound + 16) {
    return InvalidArgument(where + ": header claims " + std::to_string(out_bytes) +
                           " decompressed bytes from " + std::to_string(in.size()) +
                           " LZ4 bytes, more than LZ4 can produce");
  }
  std::vector<std::byte> out(out_bytes);
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data()),
                                      reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(in.size()), static_cast<int>(out_bytes));
  if (got < 0) return InvalidArgument(where + ": corrupt LZ4 payload");
  if (static_cast<uint64_t>(got) != out_bytes) {
    return InvalidArgument(where + ": LZ4 payload decompressed to " + std::to_string(got) +
                           " bytes, the header says " + std::to_string(out_bytes));
  }
  return out;
}

struct ZstdDctxDeleter {
  void operator()(ZSTD_DCtx* ctx) const { ZSTD_freeDCtx(ctx); }
};

Result<std::vector<std::byte>> DecompressZstd(std::span<const std::byte> in, uint64_t out_bytes,
                                              const std::string& where) {
  // The frame may state its own content size; when it does it must agree with the header.
  const unsigned long long frame_size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (frame_size == ZSTD_CONTENTSIZE_ERROR) {
    return InvalidArgument(where + ": payload is not a zstd frame");
  }
  if (frame_size != ZSTD_CONTENTSIZE_UNKNOWN && frame_size != out_bytes) {
    return InvalidArgument(where + ": zstd frame holds " + std::to_string(frame_size) +
                           " bytes, the header says " + std::to_string(out_bytes));
  }
  std::unique_ptr<ZSTD_DCtx, ZstdDctxDeleter> ctx(ZSTD_createDCtx());
  if (ctx == nullptr) return Internal(where + ": cannot create a zstd context");
  // A window larger than the whole output is never needed; refusing one keeps a hostile frame
  // from making zstd allocate more than the cap.
  int window_log = 20;
  while (window_log < 27 && (uint64_t{1} << window_log) < out_bytes) ++window_log;
  ZSTD_DCtx_setParameter(ctx.get(), ZSTD_d_windowLogMax, window_log);
  // Grow the output as data actually arrives, so that a lying header costs no memory.
  std::vector<std::byte> out(std::min<uint64_t>(out_bytes, uint64_t{1} << 20));
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  size_t produced = 0;
  size_t rc = 1;  // nonzero: the frame is not finished
  for (;;) {
    if (produced == out.size()) {
      if (out.size() == out_bytes) break;
      out.resize(std::min<uint64_t>(out_bytes, uint64_t{out.size()} * 2));
    }
    ZSTD_outBuffer output{out.data(), out.size(), produced};
    rc = ZSTD_decompressStream(ctx.get(), &output, &input);
    if (ZSTD_isError(rc)) {
      return InvalidArgument(where + ": corrupt zstd payload: " + ZSTD_getErrorName(rc));
    }
    produced = output.pos;
    if (rc == 0) break;  // frame complete
    if (input.pos == input.size && output.pos < output.size) {
      return InvalidArgument(where + ": zstd payload ends in the middle of a frame");
    }
  }
  // The output is full: the frame must end without producing another byte.
  while (rc != 0) {
    std::byte probe[1];
    ZSTD_outBuffer extra{probe, 1, 0};
    const size_t consumed_before = input.pos;
    rc = ZSTD_decompressStream(ctx.get(), &extra, &input);
    if (ZSTD_isError(rc)) {
      return InvalidArgument(where + ": corrupt zstd payload: " + ZSTD_getErrorName(rc));
    }
    if (extra.pos != 0) {
      return InvalidArgument(where + ": zstd payload decompresses to more than the " +
                             std::to_string(out_bytes) + " bytes the header says");
    }
    if (rc != 0 && input.pos == consumed_before) {
      return InvalidArgument(where + ": zstd payload ends in the middle of a frame");
    }
  }
  if (input.pos != input.size) {
    return InvalidArgument(where + ": " + std::to_string(input.size - input.pos) +
                           " bytes follow the zstd frame");
  }
  if (produced != out_bytes) {
    return InvalidArgument(where + ": zstd payload decompressed to " + std::to_string(produced) +
                           " bytes, the header says " + std::to_string(out_bytes));
  }
  out.resize(produced);
  return out;
}

// A string field [offset, offset + length) of an entry header, trailing NULs dropped.
Result<std::string> HeaderString(std::span<const std::byte> header, uint64_t offset,
                                 uint64_t length, const std::string& where,
                                 std::string_view field) {
  if (!InRange(header.size(), offset, length)) {
    return InvalidArgument(where + ": " + std::string(field) + " (" + std::to_string(length) +
                           " bytes at " + Hex(offset) + ") lies outside the " +
                           std::to_string(header.size()) + "-byte entry header");
  }
  std::string s(reinterpret_cast<const char*>(header.data()) + offset, length);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace

Result<size_t> FatbinSize(std::span<const std::byte> bytes) {
  if (bytes.size() < kContainerHeaderBytes) {
    return InvalidArgument("fatbin: " + std::to_string(bytes.size()) +
                           " bytes is too short for a container header (16)");
  }
  const auto magic = Load<uint32_t>(bytes, 0);
  if (magic != kFatbinMagic) {
    return InvalidArgument("fatbin: bad magic " + Hex(magic) + " at offset 0 (expected " +
                           Hex(kFatbinMagic) + ")");
  }
  const auto version = Load<uint16_t>(bytes, 4);
  const auto header_bytes = Load<uint16_t>(bytes, 6);
  const auto entries_bytes = Load<uint64_t>(bytes, 8);
  if (version != 1) {
    return InvalidArgument("fatbin: container version " + std::to_string(version) +
                           " is not supported (only 1)");
  }
  if (header_bytes < kContainerHeaderBytes) {
    return InvalidArgument("fatbin: container header size " + std::to_string(header_bytes) +
                           " at offset 6 is smaller than 16");
  }
  uint64_t total = 0;
  if (!CheckedAdd(header_bytes, entries_bytes, &total) || total > kMaxContainerBytes) {
    return InvalidArgument("fatbin: container size " + std::to_string(entries_bytes) +
                           " at offset 8 is implausible (more than 4 GiB)");
  }
  return static_cast<size_t>(total);
}

Result<Fatbin> ParseFatbin(std::span<const std::byte> bytes) {
  FLYT_ASSIGN_OR_RETURN(const size_t total, FatbinSize(bytes));
  if (total > bytes.size()) {
    return InvalidArgument("fatbin: container is " + std::to_string(total) + " bytes but only " +
                           std::to_string(bytes.size()) + " are there (truncated)");
  }
  const std::span<const std::byte> container = bytes.first(total);
  Fatbin fatbin;
  fatbin.size_bytes = total;
  uint64_t pos = Load<uint16_t>(container, 6);
  for (size_t index = 0; pos < total; ++index) {
    const std::string where = EntryWhere(index, pos);
    if (!InRange(total, pos, kEntryHeaderBytes)) {
      return InvalidArgument(where + ": the 64-byte entry header runs past the end of the " +
                             std::to_string(total) + "-byte container");
    }
    const auto kind = Load<uint16_t>(container, pos);
    const auto header_bytes = Load<uint32_t>(container, pos + 4);
    const auto stored_bytes = Load<uint64_t>(container, pos + 8);
    const auto compressed_bytes = Load<uint32_t>(container, pos + 16);
    const auto options_descriptor = Load<uint32_t>(container, pos + 20);
    const auto minor = Load<uint16_t>(container, pos + 24);
    const auto major = Load<uint16_t>(container, pos + 26);
    const auto arch = Load<uint32_t>(container, pos + 28);
    const auto name_offset = Load<uint32_t>(container, pos + 32);
    const auto name_bytes = Load<uint32_t>(container, pos + 36);
    const auto flags = Load<uint64_t>(container, pos + 40);
    const auto decompressed_bytes = Load<uint64_t>(container, pos + 56);
    if (header_bytes < kEntryHeaderBytes) {
      return InvalidArgument(where + ": entry header size " + std::to_string(header_bytes) +
                             " is smaller than 64");
    }
    uint64_t payload_at = 0;
    uint64_t next = 0;
    if (!CheckedAdd(pos, header_bytes, &payload_at) ||
        !CheckedAdd(payload_at, stored_bytes, &next) || next > total) {
      return InvalidArgument(where + ": header (" + std::to_string(header_bytes) +
                             " bytes) and payload (" + std::to_string(stored_bytes) +
                             " bytes) run past the end of the " + std::to_string(total) +
                             "-byte container");
    }
    const std::span<const std::byte> header = container.subspan(pos, header_bytes);
    const std::span<const std::byte> stored = container.subspan(payload_at, stored_bytes);
    pos = next;
    if (kind != kEntryKindPtx && kind != kEntryKindElf) {
      ++fatbin.skipped_entries;  // LTO IR and kinds newer than this reader
      continue;
    }
    FatbinEntry entry;
    entry.kind = kind == kEntryKindPtx ? FatbinEntry::Kind::kPtx : FatbinEntry::Kind::kElf;
    entry.sm_arch = arch;
    entry.stored_size_bytes = stored_bytes;
    entry.flags = flags;
    entry.version_major = major;
    entry.version_minor = minor;
    if (name_bytes != 0) {
      FLYT_ASSIGN_OR_RETURN(entry.object_name,
                            HeaderString(header, name_offset, name_bytes, where, "object name"));
    }
    if (options_descriptor != 0) {
      if (!InRange(header.size(), options_descriptor, 8)) {
        return InvalidArgument(where + ": options descriptor at " + Hex(options_descriptor) +
                               " lies outside the " + std::to_string(header.size()) +
                               "-byte entry header");
      }
      const auto options_offset = Load<uint32_t>(header, options_descriptor);
      const auto options_bytes = Load<uint32_t>(header, options_descriptor + 4);
      if (options_bytes != 0) {
        FLYT_ASSIGN_OR_RETURN(entry.options, HeaderString(header, options_offset, options_bytes,
                                                          where, "ptxas options"));
      }
    }
    const bool lz4 = (flags & kFlagLz4) != 0;
    const bool zstd = (flags & kFlagZstd) != 0;
    if (lz4 && zstd) {
      return InvalidArgument(where + ": flags " + Hex(flags) + " claim both LZ4 and zstd");
    }
    if (lz4 || zstd) {
      entry.was_compressed = true;
      entry.compression = lz4 ? "lz4" : "zstd";
      if (compressed_bytes == 0 || compressed_bytes > stored_bytes) {
        return InvalidArgument(where + ": compressed size " + std::to_string(compressed_bytes) +
                               " does not fit the " + std::to_string(stored_bytes) +
                               "-byte payload");
      }
      if (decompressed_bytes == 0 || decompressed_bytes > MaxEntryBytes()) {
        return InvalidArgument(where + ": decompressed size " + std::to_string(decompressed_bytes) +
                               " is out of range (1 to " + std::to_string(MaxEntryBytes()) + ")");
      }
      const std::span<const std::byte> packed = stored.first(compressed_bytes);
      FLYT_ASSIGN_OR_RETURN(entry.payload, lz4 ? DecompressLz4(packed, decompressed_bytes, where)
                                               : DecompressZstd(packed, decompressed_bytes, where));
    } else {
      entry.payload.assign(stored.begin(), stored.end());
    }
    if (entry.kind == FatbinEntry::Kind::kPtx) {
      while (!entry.payload.empty() && entry.payload.back() == std::byte{0}) {
        entry.payload.pop_back();
      }
    }
    fatbin.entries.push_back(std::move(entry));
  }
  return fatbin;
}

Result<std::vector<std::span<const std::byte>>> SplitFatbins(std::span<const std::byte> bytes) {
  std::vector<std::span<const std::byte>> containers;
  uint64_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes[pos] == std::byte{0}) {  // padding between containers
      ++pos;
      continue;
    }
    auto size = FatbinSize(bytes.subspan(pos));
    if (!size.ok()) {
      return size.status().WithContext("container " + std::to_string(containers.size()) +
                                       " at offset " + Hex(pos));
    }
    if (!InRange(bytes.size(), pos, *size)) {
      return InvalidArgument("container " + std::to_string(containers.size()) + " at offset " +
                             Hex(pos) + " is " + std::to_string(*size) + " bytes but only " +
                             std::to_string(bytes.size() - pos) + " remain (truncated)");
    }
    containers.push_back(bytes.subspan(pos, *size));
    pos += *size;
  }
  return containers;
}

Result<std::vector<KernelInfo>> KernelsOf(const Fatbin& fatbin) {
  // One KernelInfo per (name, sm_arch): cubins first, then PTX for the pairs no cubin covers.
  std::map<std::pair<std::string, uint32_t>, KernelInfo> by_key;
  for (const bool want_elf : {true, false}) {
    for (size_t i = 0; i < fatbin.entries.size(); ++i) {
      const FatbinEntry& e = fatbin.entries[i];
      if ((e.kind == FatbinEntry::Kind::kElf) != want_elf) continue;
      const std::string context = "fatbin entry " + std::to_string(i) + " (" +
                                  (want_elf ? "sm_" : "compute_") + std::to_string(e.sm_arch) +
                                  (want_elf ? " cubin)" : " PTX)");
      auto kernels =
          want_elf ? ParseCubin(e.payload, e.sm_arch)
                   : ParsePtx(std::string_view(reinterpret_cast<const char*>(e.payload.data()),
                                               e.payload.size()),
                              e.sm_arch);
      if (!kernels.ok()) return kernels.status().WithContext(context);
      for (KernelInfo& k : *kernels) {
        auto key = std::make_pair(k.name, k.sm_arch);
        by_key.try_emplace(std::move(key), std::move(k));
      }
    }
  }
  std::vector<KernelInfo> out;
  out.reserve(by_key.size());
  for (auto& [key, kernel] : by_key) out.push_back(std::move(kernel));
  return out;
}

Result<std::vector<std::span<const std::byte>>> FatbinsOfWrapper(const void* wrapper) {
  // struct __fatBinC_Wrapper_t { int magic; int version; const unsigned long long* data;
  //                              void* filename_or_fatbins; }   (crt/fatbinary_section.h)
  struct Wrapper {
    int32_t magic;
    int32_t version;
    const void* data;
    const void* filename_or_fatbins;
  };
  if (wrapper == nullptr) return InvalidArgument("fatbin wrapper: null pointer");
  Wrapper w;
  std::memcpy(&w, wrapper, sizeof(w));
  if (static_cast<uint32_t>(w.magic) != kFatbinWrapperMagic) {
    return InvalidArgument("fatbin wrapper: bad magic " + Hex(static_cast<uint32_t>(w.magic)) +
                           " (expected " + Hex(kFatbinWrapperMagic) + ")");
  }
  if (w.version != 1 && w.version != 2) {
    return InvalidArgument("fatbin wrapper: version " + std::to_string(w.version) +
                           " is not supported (1, or 2 for -rdc=true)");
  }
  // The runtime knows only a pointer: read the 16-byte header, then trust its size.
  auto container_at = [](const void* p,
                         const std::string& what) -> Result<std::span<const std::byte>> {
    if (p == nullptr) return InvalidArgument("fatbin wrapper: " + what + " is a null pointer");
    const auto* bytes = static_cast<const std::byte*>(p);
    auto size = FatbinSize(std::span<const std::byte>(bytes, kContainerHeaderBytes));
    if (!size.ok()) return size.status().WithContext("fatbin wrapper: " + what);
    return std::span<const std::byte>(bytes, *size);
  };
  std::vector<std::span<const std::byte>> out;
  FLYT_ASSIGN_OR_RETURN(auto main_container, container_at(w.data, "data"));
  out.push_back(main_container);
  if (w.version == 2 && w.filename_or_fatbins != nullptr) {
    const auto* list = static_cast<const void* const*>(w.filename_or_fatbins);
    for (size_t i = 0; list[i] != nullptr; ++i) {
      if (i == kMaxPrelinkedFatbins) {
        return InvalidArgument("fatbin wrapper: prelinked list has no end after " +
                               std::to_string(kMaxPrelinkedFatbins) + " entries");
      }
      FLYT_ASSIGN_OR_RETURN(auto c, container_at(list[i], "prelinked fatbin " + std::to_string(i)));
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace flyt::cuda
