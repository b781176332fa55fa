// The driver's private export tables (cuGetExportTable), which NVIDIA's static runtime — nvcc's
// default — and the libraries built on it ask for by UUID before anything else. Each table is an
// array of pointers, all run in the program's process: the first entry of each but the
// context-local storage is the table's size in bytes, the others are functions. flyt provides the
// tables a runtime needs, from what public implementations of the interface establish (the slots'
// meaning is not documented by NVIDIA):
//
//   6bd5fb6c-5bf4-e74a-8987-d93912fd9df9  the runtime's interface, 13 entries: a module from a
//        fat binary (slots 1, 6: the __fatBinC_Wrapper_t the program registered; 8: an image
//        with cuModuleLoadDataEx's options), the primary context of a device (slot 2: its
//        handle, not retained), a destroyed fat binary (7: nothing to do), compilers loaded
//        (12: success); the rest are empty.
//   a094798c-2e74-2e74-93f2-0800200c0a66  the tools' runtime callbacks: two enable buffers, all
//        zero (no tool subscribed), and callbacks that do nothing.
//   42d85a81-23f6-cb47-8298-f6e78a3aecdc  the tools' thread-local state: set and get the current
//        context.
//   c693336e-1121-df11-a8c3-68f355d89593  context-local storage (no size entry): register,
//        unregister and get a value by (context, key); a null context is the current one.
//   263e8860-7cd2-6143-92f6-bbd5006dfa7e  context checks: no context is a wrapped one.
//   d4082055-bde6-704b-8d34-ba123c66e1f2  the integrity check: the runtime asks for a 16-byte
//        answer (two fixed ones, then an HMAC-MD2 over the driver version, the process, the
//        thread, the tables' addresses, a time and every device's UUID and PCI location) and
//        compares it with its own — the values must be those this library reports.
// Any other table (f8cff951-… included: answering it would send the runtime down another start-up
// path) is refused.
//
// Thread safety: the tables are constant; context-local storage has its own lock.
#pragma once

#include <cuda.h>

namespace flyt::libcuda {

// The table of `id`, or null.
const void* FindExportTable(const CUuuid& id);

}  // namespace flyt::libcuda
