#include "cuda/image.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cuda/elf.h"

namespace flyt::cuda {
namespace {

constexpr uint64_t kMaxImageBytes = kMaxFatbinEntryBytes * 4;

template <typename T>
T Read(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// The extent of an ELF image: past its section and program header tables and every section's
// bytes (a cubin ends with its section table, but nothing requires it).
Result<size_t> ElfSize(const std::byte* p) {
  if (Read<uint8_t>(p + 4) != 2 || Read<uint8_t>(p + 5) != 1) {
    return InvalidArgument("the ELF image is not 64-bit little-endian");
  }
  const uint64_t phoff = Read<uint64_t>(p + 0x20), shoff = Read<uint64_t>(p + 0x28);
  const uint16_t phentsize = Read<uint16_t>(p + 0x36), phnum = Read<uint16_t>(p + 0x38);
  const uint16_t shentsize = Read<uint16_t>(p + 0x3A), shnum = Read<uint16_t>(p + 0x3C);
  if (shentsize < 64 && shnum != 0) return InvalidArgument("ELF section headers too small");
  if (shoff > kMaxImageBytes || phoff > kMaxImageBytes) {
    return InvalidArgument("ELF header tables lie past any plausible image");
  }
  uint64_t end = std::max<uint64_t>(64, phoff + uint64_t{phnum} * phentsize);
  end = std::max(end, shoff + uint64_t{shnum} * shentsize);
  for (uint16_t i = 0; i < shnum; ++i) {
    const std::byte* sh = p + shoff + uint64_t{i} * shentsize;
    const uint32_t type = Read<uint32_t>(sh + 4);
    const uint64_t offset = Read<uint64_t>(sh + 0x18), size = Read<uint64_t>(sh + 0x20);
    if (type == kElfSectionNoBits) continue;
    if (offset > kMaxImageBytes || size > kMaxImageBytes) {
      return InvalidArgument("ELF section " + std::to_string(i) + " lies past any plausible image");
    }
    end = std::max(end, offset + size);
  }
  if (end > kMaxImageBytes) return InvalidArgument("ELF image larger than any plausible one");
  return static_cast<size_t>(end);
}

// PTX says what it is: ".version" and ".target" directives (after comments).
bool LooksLikePtx(std::string_view text) {
  return text.find(".version") != std::string_view::npos &&
         text.find(".target") != std::string_view::npos;
}

}  // namespace

Result<ImageSpan> LocateImage(const void* image) {
  if (image == nullptr) return InvalidArgument("no image (null)");
  auto p = static_cast<const std::byte*>(image);
  const uint32_t magic = Read<uint32_t>(p);
  if (magic == kFatbinWrapperMagic) {
    // struct { int magic; int version; const void* data; void* filename_or_fatbins; }
    const void* data = Read<const void*>(p + 8);
    if (data == nullptr) return InvalidArgument("fatbin wrapper without a container");
    return LocateImage(data);
  }
  if (magic == kFatbinMagic) {
    FLYT_ASSIGN_OR_RETURN(size_t size, FatbinSize({p, 16}));
    if (size > kMaxImageBytes) return InvalidArgument("fatbin larger than any plausible one");
    return ImageSpan{ImageKind::kFatbin, {p, size}};
  }
  if (magic == 0x464C457F) {  // "\x7fELF"
    FLYT_ASSIGN_OR_RETURN(size_t size, ElfSize(p));
    return ImageSpan{ImageKind::kCubin, {p, size}};
  }
  // PTX: NUL-terminated text that says what it is (".version" comes first, after comments).
  const size_t length = ::strnlen(reinterpret_cast<const char*>(p), kMaxImageBytes);
  if (length == kMaxImageBytes) return InvalidArgument("image is neither fatbin, ELF nor PTX");
  if (!LooksLikePtx({reinterpret_cast<const char*>(p), length})) {
    return InvalidArgument("image is neither a fatbin, a cubin (ELF) nor PTX text");
  }
  return ImageSpan{ImageKind::kPtx, {p, length + 1}};
}

Result<std::vector<KernelInfo>> KernelsOfImage(const ImageSpan& image) {
  switch (image.kind) {
    case ImageKind::kFatbin: {
      FLYT_ASSIGN_OR_RETURN(Fatbin fatbin, ParseFatbin(image.bytes));
      return KernelsOf(fatbin);
    }
    case ImageKind::kCubin:
      return ParseCubin(image.bytes);
    case ImageKind::kPtx: {
      std::string_view text(reinterpret_cast<const char*>(image.bytes.data()), image.bytes.size());
      while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
      return ParsePtx(text);
    }
  }
  return InvalidArgument("unknown image kind");
}

Result<std::vector<KernelInfo>> KernelsOfImage(std::span<const std::byte> bytes) {
  if (bytes.size() < 4)
    return InvalidArgument("image of " + std::to_string(bytes.size()) + " bytes");
  const uint32_t magic = Read<uint32_t>(bytes.data());
  ImageKind kind = magic == kFatbinMagic ? ImageKind::kFatbin
                   : magic == 0x464C457F ? ImageKind::kCubin
                                         : ImageKind::kPtx;
  if (kind == ImageKind::kPtx &&
      !LooksLikePtx({reinterpret_cast<const char*>(bytes.data()), bytes.size()})) {
    return InvalidArgument("image is neither a fatbin, a cubin (ELF) nor PTX text");
  }
  return KernelsOfImage(ImageSpan{kind, bytes});
}

std::map<std::string, uint64_t> GlobalsOfImage(std::span<const std::byte> bytes) {
  std::map<std::string, uint64_t> globals;
  auto add = [&globals](std::span<const std::byte> cubin) {
    Result<ElfFile> elf = ElfFile::Parse(cubin, "cubin");
    if (!elf.ok()) return;
    Result<std::vector<ElfSymbol>> symbols = elf->Symbols();
    if (!symbols.ok()) return;
    for (const ElfSymbol& s : *symbols) {
      constexpr uint8_t kObject = 1;  // STT_OBJECT
      if (s.type() != kObject || s.size_bytes == 0 || s.name.empty()) continue;
      uint64_t& size = globals[std::string(s.name)];
      size = std::max(size, s.size_bytes);
    }
  };
  if (bytes.size() < 4) return globals;
  const uint32_t magic = Read<uint32_t>(bytes.data());
  if (magic == 0x464C457F) {
    add(bytes);
  } else if (magic == kFatbinMagic) {
    if (Result<Fatbin> fatbin = ParseFatbin(bytes); fatbin.ok()) {
      for (const FatbinEntry& e : fatbin->entries) {
        if (e.kind == FatbinEntry::Kind::kElf) add(e.payload);
      }
    }
  }
  return globals;
}

Result<std::vector<std::byte>> PackParameters(const KernelInfo& layout, void* const* args) {
  std::vector<std::byte> params(layout.param_bytes);
  if (!layout.params.empty() && args == nullptr) {
    return InvalidArgument("kernel " + layout.name +
                           " takes arguments; the argument array is null");
  }
  for (const KernelParam& p : layout.params) {
    if (uint64_t{p.offset} + p.size_bytes > params.size()) {
      return InvalidArgument("parameter layout of " + layout.name + " overruns its buffer");
    }
    if (p.size_bytes != 0) std::memcpy(params.data() + p.offset, args[p.ordinal], p.size_bytes);
  }
  return params;
}

}  // namespace flyt::cuda
