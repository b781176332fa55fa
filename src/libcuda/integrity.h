// The answer to the CUDA runtime's integrity check (the export table d4082055-…, export_tables.h):
// NVIDIA's runtime asks the driver for 16 bytes and compares them with its own computation over
// the same inputs — two fixed answers for a release's first two versions, else an HMAC-MD2 (a
// constant key) over the driver version, the asked version, the process and thread ids, the
// addresses of two export tables and of the check itself, a time, and every device's UUID and
// PCI domain, bus and device. A pure function, so that tests check it against known answers.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace flyt::libcuda {

struct IntegrityInputs {
  uint32_t driver_version = 0;  // what cuDriverGetVersion reports
  uint32_t version = 0;         // the runtime's argument
  uint32_t pid = 0;
  uint32_t tid = 0;             // pthread_self()'s low 32 bits
  uint64_t cudart_table = 0;    // the address of the runtime-interface table
  uint64_t integrity_table = 0;
  uint64_t function = 0;        // the check's own address (that table's slot 1)
  uint64_t unix_seconds = 0;
  struct Device {
    std::array<uint8_t, 16> uuid{};
    int32_t pci_domain = 0;
    int32_t pci_bus = 0;
    int32_t pci_device = 0;
  };
  std::span<const Device> devices;
};

std::array<uint64_t, 2> IntegrityAnswer(const IntegrityInputs& in);

}  // namespace flyt::libcuda
