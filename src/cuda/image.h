// Module images as the driver API takes them (cuModuleLoadData, cuLibraryLoadData): a fatbin
// container, a fatbin wrapper (the struct nvcc's host code registers, which points at a
// container), a cubin (ELF) or PTX text — handed over as a bare pointer, so the image's size is
// read from its own headers. And the parameter buffer of a launch, packed by a kernel's layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "cuda/fatbin.h"

namespace flyt::cuda {

enum class ImageKind { kFatbin, kCubin, kPtx };

struct ImageSpan {
  ImageKind kind = ImageKind::kFatbin;
  std::span<const std::byte> bytes;  // the whole image (PTX: its text and the terminating NUL)
};

// The image at `image` (a wrapper is followed to its container). Refuses, naming why, what is
// none of the three, and a header that claims more than kMaxFatbinEntryBytes * 4.
[[nodiscard]] Result<ImageSpan> LocateImage(const void* image);

// Every kernel of an image, as ParseFatbin/KernelsOf, ParseCubin or ParsePtx read it.
[[nodiscard]] Result<std::vector<KernelInfo>> KernelsOfImage(const ImageSpan& image);
// The same for bytes whose kind is read from their first bytes (fatbin, ELF, else PTX text).
[[nodiscard]] Result<std::vector<KernelInfo>> KernelsOfImage(std::span<const std::byte> bytes);

// The sizes of an image's variables (__device__, __constant__, __managed__) by name, from its
// cubins' symbol tables (the largest where entries differ); empty for PTX, which the driver
// compiles.
[[nodiscard]] std::map<std::string, uint64_t> GlobalsOfImage(std::span<const std::byte> bytes);

// The launch's parameter buffer: each argument (args[ordinal] points at it) copied to its offset.
// Refuses null args for a kernel with parameters and a layout that overruns its own buffer.
[[nodiscard]] Result<std::vector<std::byte>> PackParameters(const KernelInfo& layout,
                                                            void* const* args);

}  // namespace flyt::cuda
