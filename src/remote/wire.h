// Wire primitives of flyt's remote CUDA protocol: little-endian fixed-width integers, floats,
// length-prefixed strings and byte strings, and counted vectors.
//
// Writer appends to a byte vector it owns. Reader walks a span it does not own and never reads
// past its end: every Get returns false on truncated or out-of-range input and leaves the Reader
// failed (later Gets fail too), so a decoder can run a whole message and check once. Lengths and
// counts are bounded by the bytes that remain, so hostile input cannot make a decoder allocate
// more than the frame it came in. Neither class is thread-safe; each is used by one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace flyt::remote {

using Bytes = std::vector<std::byte>;

// The unsigned type an integer, bool or enum travels as.
template <typename T>
struct WireUnsigned {
  using type = std::make_unsigned_t<T>;
};
template <>
struct WireUnsigned<bool> {
  using type = uint8_t;
};
template <typename T>
  requires std::is_enum_v<T>
struct WireUnsigned<T> {
  using type = std::make_unsigned_t<std::underlying_type_t<T>>;
};

class Writer {
 public:
  explicit Writer(Bytes& out) : out_(&out) {}

  template <typename T>
    requires std::is_integral_v<T> || std::is_enum_v<T>
  void Put(T value) {
    using U = typename WireUnsigned<T>::type;
    U u = static_cast<U>(value);
    std::byte buf[sizeof(U)];
    for (size_t i = 0; i < sizeof(U); ++i) buf[i] = static_cast<std::byte>((u >> (8 * i)) & 0xFF);
    Append(buf, sizeof(U));
  }
  void Put(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    Put(bits);
  }
  void Put(const std::string& value) { PutBlob(value.data(), value.size()); }
  void Put(const Bytes& value) { PutBlob(value.data(), value.size()); }
  // u32 length, then the bytes.
  void PutBlob(const void* data, size_t size) {
    Put(static_cast<uint32_t>(size));
    Append(data, size);
  }

 private:
  void Append(const void* data, size_t size) {
    const auto* p = static_cast<const std::byte*>(data);
    out_->insert(out_->end(), p, p + size);
  }

  Bytes* out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}

  template <typename T>
    requires std::is_integral_v<T> || std::is_enum_v<T>
  bool Get(T& value) {
    using U = typename WireUnsigned<T>::type;
    if (!Need(sizeof(U))) return false;
    U u = 0;
    for (size_t i = 0; i < sizeof(U); ++i) {
      u |= static_cast<U>(static_cast<U>(in_[pos_ + i]) << (8 * i));
    }
    pos_ += sizeof(U);
    if constexpr (std::is_same_v<T, bool>) {
      if (u > 1) return Fail();
      value = u != 0;
    } else {
      value = static_cast<T>(u);
    }
    return true;
  }
  bool Get(float& value) {
    uint32_t bits = 0;
    if (!Get(bits)) return false;
    std::memcpy(&value, &bits, sizeof value);
    return true;
  }
  bool Get(std::string& value) {
    std::span<const std::byte> blob;
    if (!GetBlob(blob)) return false;
    value.assign(reinterpret_cast<const char*>(blob.data()), blob.size());
    return true;
  }
  bool Get(Bytes& value) {
    std::span<const std::byte> blob;
    if (!GetBlob(blob)) return false;
    value.assign(blob.begin(), blob.end());
    return true;
  }
  // Reads a u32 element count for a vector whose elements take at least one byte each: a count
  // larger than what remains is a lie, and refusing it bounds the allocation by the frame size.
  bool GetCount(uint32_t& count) {
    if (!Get(count)) return false;
    if (count > remaining()) return Fail();
    return true;
  }
  // A u32-length-prefixed blob, as a view into the input.
  bool GetBlob(std::span<const std::byte>& blob) {
    uint32_t size = 0;
    if (!Get(size)) return false;
    if (!Need(size)) return false;
    blob = in_.subspan(pos_, size);
    pos_ += size;
    return true;
  }
  bool GetRaw(std::span<const std::byte>& out, size_t size) {
    if (!Need(size)) return false;
    out = in_.subspan(pos_, size);
    pos_ += size;
    return true;
  }

  size_t remaining() const { return failed_ ? 0 : in_.size() - pos_; }
  bool failed() const { return failed_; }
  // True when everything was read and nothing failed: a message with trailing bytes is malformed.
  bool done() const { return !failed_ && pos_ == in_.size(); }

 private:
  bool Need(size_t n) {
    if (failed_ || in_.size() - pos_ < n) return Fail();
    return true;
  }
  bool Fail() {
    failed_ = true;
    return false;
  }

  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// Free Encode/Decode: the primitives above, plus counted vectors of anything that has its own
// Encode/Decode overload (found by argument-dependent lookup, so message structs may add theirs).
template <typename T>
  requires requires(Writer& w, const T& v) { w.Put(v); }
void Encode(Writer& w, const T& value) {
  w.Put(value);
}
template <typename T>
  requires requires(Reader& r, T& v) { r.Get(v); }
bool Decode(Reader& r, T& value) {
  return r.Get(value);
}
inline void Encode(Writer& w, const Bytes& value) { w.Put(value); }
inline bool Decode(Reader& r, Bytes& value) { return r.Get(value); }
template <typename T>
void Encode(Writer& w, const std::vector<T>& values) {
  w.Put(static_cast<uint32_t>(values.size()));
  for (const T& v : values) Encode(w, v);
}
template <typename T>
bool Decode(Reader& r, std::vector<T>& values) {
  uint32_t count = 0;
  if (!r.GetCount(count)) return false;
  values.clear();
  // A count is bounded by the bytes left, not by the memory its elements take once decoded: a
  // hostile count reserves little, and the vector grows only with elements that really decode.
  values.reserve(std::min<uint32_t>(count, 1024));
  for (uint32_t i = 0; i < count; ++i) {
    T v{};
    if (!Decode(r, v)) return false;
    values.push_back(std::move(v));
  }
  return true;
}

}  // namespace flyt::remote
