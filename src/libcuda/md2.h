// MD2 (RFC 1319) and HMAC-MD2 (RFC 2104, 16-byte blocks): the digest of the CUDA runtime's
// integrity check (export_tables.h), which NVIDIA's runtime computes itself and compares with the
// driver's answer. Nothing else in flyt uses MD2; it is not a security primitive here.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace flyt::libcuda {

using Md2Digest = std::array<uint8_t, 16>;

Md2Digest Md2(std::span<const uint8_t> message);
Md2Digest HmacMd2(std::span<const uint8_t, 16> key, std::span<const uint8_t> message);

}  // namespace flyt::libcuda
