// Live migration on the simulated device (backend.h MallocAt / ModuleGetGlobalAt): two SimBackends
// in one process stand for the old and the new server. Memory made at the old server's addresses
// on the new one is its own, pointers stored in it stay valid, a taken range is refused leaving
// nothing behind, freed ranges are reused, and a module's global is placed where it lived.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <vector>

#include "remote_sim/sim_address_space.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote {
namespace {

using sim_internal::SimAddressSpace;

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::unique_ptr<Session> Open(Backend& backend, const char* label) {
  auto session = backend.OpenSession(label);
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  return session.ok() ? std::move(session).value() : nullptr;
}

template <typename T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

std::vector<uint8_t> Read(Session& session, DevicePtr ptr, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  CudaStatus status =
      session.MemcpyDtoH(std::as_writable_bytes(std::span<uint8_t>(out)), ptr, kDefaultStream);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

uint64_t FreeBytes(Session& session) {
  auto info = session.MemGetInfo();
  EXPECT_TRUE(info.ok());
  return info.ok() ? info->free_bytes : 0;
}

class SimMigrationTest : public ::testing::Test {
 protected:
  SimMigrationTest()
      : old_server_(MakeSimBackend()),
        new_server_(MakeSimBackend()),
        old_(Open(*old_server_, "old")),
        new_(Open(*new_server_, "new")) {}

  std::unique_ptr<Backend> old_server_;
  std::unique_ptr<Backend> new_server_;
  std::unique_ptr<Session> old_;
  std::unique_ptr<Session> new_;
};

TEST_F(SimMigrationTest, TheSimulatedDeviceCanPlaceMemory) {
  EXPECT_TRUE(old_->CanPlaceMemory());
  EXPECT_TRUE(new_->CanPlaceMemory());
}

TEST_F(SimMigrationTest, MemoryIsMadeAgainAtTheSameAddressAndIsIndependent) {
  constexpr size_t kBytes = 4096;
  auto data = old_->Malloc(kBytes);
  auto big = old_->Malloc(8 * kMiB);  // mmap-backed, 2 MiB aligned
  ASSERT_TRUE(data.ok() && big.ok());
  EXPECT_GE(*data, SimAddressSpace::kBase);
  EXPECT_EQ(*big % (2 * kMiB), 0u);

  // The old server's memory holds a pointer into itself (an interior pointer, as a linked
  // structure would) and a pointer to the other allocation.
  std::vector<uint64_t> words(kBytes / 8);
  for (size_t i = 0; i < words.size(); ++i) words[i] = 0x1111111111111111ull * (i % 15);
  words[0] = *data + 256;
  words[1] = *big + 5 * kMiB;
  ASSERT_TRUE(old_->MemcpyHtoD(*data, Bytes(words), kDefaultStream).ok());

  // Migration: the new server makes both at the same addresses and gets the bytes.
  auto moved = new_->MallocAt(*data, kBytes);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, *data);
  auto moved_big = new_->MallocAt(*big, 8 * kMiB);
  ASSERT_TRUE(moved_big.ok()) << moved_big.status().ToString();
  EXPECT_EQ(*moved_big, *big);
  const std::vector<uint8_t> image = Read(*old_, *data, kBytes);
  ASSERT_TRUE(new_->MemcpyHtoD(*moved, Bytes(image), kDefaultStream).ok());

  // The stored pointers mean the same memory on the new server.
  std::vector<uint64_t> seen(kBytes / 8);
  std::memcpy(seen.data(), Read(*new_, *moved, kBytes).data(), kBytes);
  EXPECT_EQ(seen, words);
  const std::vector<uint8_t> marker = {1, 2, 3, 4};
  ASSERT_TRUE(new_->MemcpyHtoD(seen[1], Bytes(marker), kDefaultStream).ok());
  EXPECT_EQ(Read(*new_, *big + 5 * kMiB, 4), marker);
  EXPECT_EQ(Read(*new_, seen[0], 8), Read(*old_, *data + 256, 8));

  // Each server's memory is its own.
  const std::vector<uint8_t> ones(kBytes, 0xee);
  ASSERT_TRUE(new_->MemcpyHtoD(*moved, Bytes(ones), kDefaultStream).ok());
  EXPECT_EQ(Read(*old_, *data, kBytes), image);
  EXPECT_EQ(Read(*new_, *moved, kBytes), ones);
  EXPECT_EQ(Read(*old_, *big + 5 * kMiB, 4), std::vector<uint8_t>(4, 0));

  // The new server's own allocations go around the placed ones.
  auto fresh = new_->Malloc(kBytes);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(*fresh + kBytes <= *moved || *fresh >= *moved + kBytes);
  EXPECT_TRUE(*fresh + kBytes <= *big || *fresh >= *big + 8 * kMiB);

  EXPECT_TRUE(new_->Free(*moved).ok());
  EXPECT_TRUE(new_->Free(*moved_big).ok());
  EXPECT_TRUE(new_->Free(*fresh).ok());
}

TEST_F(SimMigrationTest, ATakenRangeIsRefusedAndLeavesNothingBehind) {
  // `held` with free space just before it (its neighbour freed again).
  auto before = new_->Malloc(1024);
  auto held = new_->Malloc(4096);
  ASSERT_TRUE(before.ok() && held.ok());
  ASSERT_TRUE(new_->Free(*before).ok());
  ASSERT_GT(*held, SimAddressSpace::kBase);
  const uint64_t free_before = FreeBytes(*new_);

  for (auto [address, bytes] : {std::pair<uint64_t, uint64_t>{*held, 4096},  // the same
                                {*held + 1024, 256},                          // inside
                                {*held - 256, 512},                           // over its start
                                {*held + 4096 - 256, 1024}}) {                // over its end
    auto refused = new_->MallocAt(address, bytes);
    ASSERT_FALSE(refused.ok()) << std::hex << address;
    EXPECT_EQ(refused.status().code(), CudaError::kInvalidValue) << refused.status().ToString();
  }
  // Nothing is accounted, and no range was added: a copy just past the held block still fails.
  EXPECT_EQ(FreeBytes(*new_), free_before);
  const std::vector<uint8_t> byte = {7};
  EXPECT_FALSE(new_->MemcpyHtoD(*held + 4096, Bytes(byte), kDefaultStream).ok());

  // Another client of the same server cannot take it either: the space is the device's.
  auto other = Open(*new_server_, "other");
  auto refused = other->MallocAt(*held, 4096);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), CudaError::kInvalidValue);

  // Not a device address of this backend, misaligned, empty.
  for (uint64_t address : {uint64_t{0x7f0000001000}, SimAddressSpace::kBase + SimAddressSpace::kSize,
                           SimAddressSpace::kBase + 128 * kMiB + 16}) {
    auto bad = new_->MallocAt(address, 256);
    ASSERT_FALSE(bad.ok()) << std::hex << address;
    EXPECT_EQ(bad.status().code(), CudaError::kInvalidValue) << bad.status().ToString();
  }
  EXPECT_EQ(new_->MallocAt(SimAddressSpace::kBase + 128 * kMiB, 0).status().code(),
            CudaError::kInvalidValue);
  EXPECT_EQ(FreeBytes(*new_), free_before);

  // Past the memory limit: out of memory, and the range is free again afterwards.
  SimOptions small;
  small.memory_bytes = 16 * kMiB;
  auto small_server = MakeSimBackend(small);
  auto s = Open(*small_server, "small");
  const uint64_t at = SimAddressSpace::kBase + 64 * kMiB;
  auto too_big = s->MallocAt(at, 32 * kMiB);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), CudaError::kMemoryAllocation);
  EXPECT_TRUE(s->MallocAt(at, 8 * kMiB).ok());
}

TEST_F(SimMigrationTest, FreedPlacedMemoryIsReused) {
  // A small block: its range goes back to the space at once, where MallocAt and Malloc find it.
  auto first = new_->Malloc(512);
  ASSERT_TRUE(first.ok());
  const uint64_t at = *first;
  ASSERT_TRUE(new_->Free(at).ok());
  auto small = new_->MallocAt(at, 512);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  ASSERT_TRUE(new_->Free(*small).ok());
  auto reused = new_->Malloc(512);
  ASSERT_TRUE(reused.ok());
  EXPECT_EQ(*reused, at);
  ASSERT_TRUE(new_->Free(*reused).ok());

  // A large block is kept for the session's next allocation of its size, address and all.
  const uint64_t big_at = (at + 64 * kMiB) / (2 * kMiB) * (2 * kMiB);
  auto big = new_->MallocAt(big_at, 4 * kMiB);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  ASSERT_TRUE(new_->Free(*big).ok());
  auto again = new_->Malloc(4 * kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, big_at);
  ASSERT_TRUE(new_->Free(*again).ok());

  // A freed block the session keeps does not stand in the way of placing memory there.
  auto placed = new_->MallocAt(big_at + kMiB, 256);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  ASSERT_TRUE(new_->Free(*placed).ok());

  // A session's placed memory goes back to the space when the session ends.
  auto other = Open(*new_server_, "other");
  ASSERT_TRUE(other->MallocAt(big_at, 4 * kMiB).ok());
  other.reset();
  EXPECT_TRUE(new_->MallocAt(big_at, 4 * kMiB).ok());
}

TEST_F(SimMigrationTest, EachServerHandsOutAddressesOfItsOwn) {
  // Two backends (with a process per client, two clients) start their allocations at different,
  // random places of the space, as two processes' host addresses differ.
  auto a = old_->Malloc(256);
  auto b = new_->Malloc(256);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);  // equal once in 2^24
  for (DevicePtr p : {*a, *b}) {
    EXPECT_GE(p, SimAddressSpace::kBase);
    EXPECT_LT(p, SimAddressSpace::kBase + SimAddressSpace::kSize / 2 + kMiB);
  }
}

std::vector<std::byte> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

TEST_F(SimMigrationTest, AGlobalIsPlacedWhereItLivedOnTheOldServer) {
  const auto image =
      ReadFile(std::filesystem::path(FLYT_SOURCE_DIR) / "tests/data/remote/driver_kernels.fatbin");
  ASSERT_FALSE(image.empty());
  auto old_module = old_->ModuleLoad(image);
  ASSERT_TRUE(old_module.ok()) << old_module.status().ToString();
  auto old_scale = old_->ModuleGetGlobal(*old_module, "flyt_scale", 4);
  ASSERT_TRUE(old_scale.ok()) << old_scale.status().ToString();
  // Something else of the new server's sits where the old global is: placing it there fails
  // until that goes.
  auto squatter = new_->MallocAt(old_scale->ptr, 256);
  ASSERT_TRUE(squatter.ok()) << squatter.status().ToString();

  auto module = new_->ModuleLoad(image);
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  auto blocked = new_->ModuleGetGlobalAt(*module, "flyt_scale", 4, old_scale->ptr);
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), CudaError::kInvalidValue);
  ASSERT_TRUE(new_->Free(*squatter).ok());

  auto scale = new_->ModuleGetGlobalAt(*module, "flyt_scale", 4, old_scale->ptr);
  ASSERT_TRUE(scale.ok()) << scale.status().ToString();
  EXPECT_EQ(scale->ptr, old_scale->ptr);
  EXPECT_EQ(scale->bytes, 4u);
  const std::vector<uint8_t> value = {0, 0, 0x40, 0x40};  // 3.0f
  ASSERT_TRUE(new_->MemcpyHtoD(scale->ptr, Bytes(value), kDefaultStream).ok());
  EXPECT_EQ(Read(*new_, scale->ptr, 4), value);
  EXPECT_EQ(Read(*old_, old_scale->ptr, 4), std::vector<uint8_t>(4, 0));

  // Asked again: the same global, where it is; at another address: refused.
  auto same = new_->ModuleGetGlobalAt(*module, "flyt_scale", 4, old_scale->ptr);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->ptr, scale->ptr);
  auto plain = new_->ModuleGetGlobal(*module, "flyt_scale", 4);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->ptr, scale->ptr);
  auto moved = new_->ModuleGetGlobalAt(*module, "flyt_scale", 4, old_scale->ptr + 4096);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), CudaError::kInvalidValue);

  // A global of the new server's own is not placed over: the old server's counter, where the
  // new server's scale sits, is refused.
  auto counter = new_->ModuleGetGlobalAt(*module, "flyt_counter", 4, scale->ptr);
  ASSERT_FALSE(counter.ok());
  EXPECT_EQ(counter.status().code(), CudaError::kInvalidValue);

  // Unloading the module gives the global's range back.
  ASSERT_TRUE(new_->ModuleUnload(*module).ok());
  auto after = new_->MallocAt(old_scale->ptr, 256);
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

}  // namespace
}  // namespace flyt::remote
