// Bounds-checked little-endian reads over untrusted bytes, shared by the fatbin, ELF and PTX
// readers of this library (internal: not for other libraries).
//
// Every reader in src/cuda checks a range with InRange before it touches it and then loads fields
// with Load<T>, which copies (no alignment assumptions). The helpers own nothing and are pure.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

namespace flyt::cuda::internal {

static_assert(std::endian::native == std::endian::little,
              "fatbins and cubins are little-endian; a big-endian host would need byte swaps");

// True when [offset, offset + length) lies inside a buffer of `size` bytes; never overflows.
constexpr bool InRange(uint64_t size, uint64_t offset, uint64_t length) {
  return offset <= size && length <= size - offset;
}

// `a + b` into *sum, or false when it would not fit in 64 bits.
constexpr bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* sum) {
  if (b > UINT64_MAX - a) return false;
  *sum = a + b;
  return true;
}

// `a * b` into *product, or false when it would not fit in 64 bits.
constexpr bool CheckedMul(uint64_t a, uint64_t b, uint64_t* product) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  *product = a * b;
  return true;
}

// The value of type T stored little-endian at bytes[offset]. The caller has checked the range.
template <typename T>
T Load(std::span<const std::byte> bytes, uint64_t offset) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// "0x1f" style, for error messages that name offsets and magic numbers.
std::string Hex(uint64_t value);

}  // namespace flyt::cuda::internal
