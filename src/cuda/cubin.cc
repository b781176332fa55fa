// Cubins: kernels, their parameter layout and their resources, from the ELF sections ptxas writes.
//
// Per kernel (an STT_FUNC symbol with STO_CUDA_ENTRY) a cubin has:
//  * .nv.info.<kernel>: attribute records (EIATTR_*) with the parameter list, the size of the
//    parameter buffer and launch bounds;
//  * .nv.info: module records keyed by symbol index: registers, stack frame;
//  * .text.<kernel> (sh_info >> 24 also holds the register count on older targets),
//    .nv.shared.<kernel> (static shared memory), .nv.constant0.<kernel> (constant bank 0).
// An attribute record is u8 format, u8 attribute, then either a u16 value (formats 1-3) or a u16
// size and that many bytes (format 4, EIFMT_SVAL).
#include <algorithm>
#include <map>
#include <string>

#include "cuda/bytes.h"
#include "cuda/elf.h"
#include "cuda/fatbin.h"

namespace flyt::cuda {
namespace {

using internal::Hex;
using internal::InRange;
using internal::Load;

constexpr uint32_t kSectionCudaInfo = 0x70000000;  // SHT_CUDA_INFO
constexpr uint8_t kStoCudaEntry = 0x10;            // st_other bit of a kernel symbol
constexpr uint8_t kSttFunc = 2;

// Attribute record formats.
constexpr uint8_t kFmtNval = 1;
constexpr uint8_t kFmtBval = 2;
constexpr uint8_t kFmtHval = 3;
constexpr uint8_t kFmtSval = 4;

// Attributes flyt reads (names as cuobjdump prints them).
constexpr uint8_t kAttrMaxThreads = 0x05;      // EIATTR_MAX_THREADS: u32 x, y, z
constexpr uint8_t kAttrParamCbank = 0x0a;      // EIATTR_PARAM_CBANK: u32 sym, u16 offset, size
constexpr uint8_t kAttrReqntid = 0x10;         // EIATTR_REQNTID: u32 x, y, z
constexpr uint8_t kAttrFrameSize = 0x11;       // EIATTR_FRAME_SIZE: u32 sym, u32 bytes
constexpr uint8_t kAttrKparamInfo = 0x17;      // EIATTR_KPARAM_INFO
constexpr uint8_t kAttrCbankParamSize = 0x19;  // EIATTR_CBANK_PARAM_SIZE: u16 bytes
constexpr uint8_t kAttrRegcount = 0x2f;        // EIATTR_REGCOUNT: u32 sym, u32 registers
constexpr uint8_t kAttrKparamInfoV2 = 0x45;    // EIATTR_KPARAM_INFO_V2 (params > 16 KiB)

// Parameters a kernel may have: CUDA allows 32764 bytes of parameters, so at most that many.
constexpr uint32_t kMaxParams = 32764;
// ptxas on sm_90 and later toolchains puts a 1 KiB system-reserved block at the start of each
// kernel's .nv.shared.<kernel> section when the module reserves shared memory; ptxas's report
// and cudaFuncGetAttributes count static shared memory without it.
constexpr uint64_t kReservedSharedBytes = 1024;

struct Record {
  uint8_t format = 0;
  uint8_t attribute = 0;
  uint16_t value = 0;                  // formats 1-3
  std::span<const std::byte> payload;  // format 4
  uint64_t offset = 0;                 // within the section, for messages
};

Result<std::vector<Record>> ReadRecords(const ElfSection& section, const std::string& where) {
  std::vector<Record> records;
  const std::span<const std::byte> data = section.data;
  uint64_t pos = 0;
  while (pos < data.size()) {
    if (!InRange(data.size(), pos, 4)) {
      return InvalidArgument(where + ": " + std::string(section.name) + ": record at " + Hex(pos) +
                             " is cut off by the end of the section");
    }
    Record r;
    r.offset = pos;
    r.format = Load<uint8_t>(data, pos);
    r.attribute = Load<uint8_t>(data, pos + 1);
    r.value = Load<uint16_t>(data, pos + 2);
    pos += 4;
    if (r.format == kFmtSval) {
      if (!InRange(data.size(), pos, r.value)) {
        return InvalidArgument(where + ": " + std::string(section.name) + ": attribute " +
                               Hex(r.attribute) + " at " + Hex(r.offset) + " claims " +
                               std::to_string(r.value) + " bytes past the end of the section");
      }
      r.payload = data.subspan(pos, r.value);
      pos += r.value;
    } else if (r.format != kFmtNval && r.format != kFmtBval && r.format != kFmtHval) {
      return InvalidArgument(where + ": " + std::string(section.name) + ": record at " +
                             Hex(r.offset) + " has unknown format " + std::to_string(r.format));
    }
    records.push_back(r);
  }
  return records;
}

// Checks that an SVAL record carries at least `bytes` bytes.
Status NeedPayload(const Record& r, uint64_t bytes, const std::string& where) {
  if (r.format != kFmtSval || r.payload.size() < bytes) {
    return InvalidArgument(where + ": attribute " + Hex(r.attribute) + " at " + Hex(r.offset) +
                           " should carry " + std::to_string(bytes) + " bytes");
  }
  return Status::Ok();
}

// The SM version in a cubin's e_flags: bits 8-15 from ELF ABI version 8 (CUDA 12.8+), bits 0-7
// before.
uint32_t SmOfFlags(const ElfFile& elf) {
  return elf.abi_version() >= 8 ? (elf.flags() >> 8) & 0xff : elf.flags() & 0xff;
}

// Module-wide per-symbol values from .nv.info.
struct ModuleInfo {
  std::map<uint32_t, uint32_t> registers;
  std::map<uint32_t, uint32_t> frame_bytes;
};

Result<ModuleInfo> ReadModuleInfo(const ElfFile& elf, const std::string& where) {
  ModuleInfo info;
  const ElfSection* section = elf.FindSection(".nv.info");
  if (section == nullptr) return info;
  FLYT_ASSIGN_OR_RETURN(auto records, ReadRecords(*section, where));
  for (const Record& r : records) {
    std::map<uint32_t, uint32_t>* into = nullptr;
    if (r.attribute == kAttrRegcount) into = &info.registers;
    if (r.attribute == kAttrFrameSize) into = &info.frame_bytes;
    if (into == nullptr) continue;
    FLYT_RETURN_IF_ERROR(NeedPayload(r, 8, where + ": .nv.info"));
    into->emplace(Load<uint32_t>(r.payload, 0), Load<uint32_t>(r.payload, 4));
  }
  return info;
}

// Reads the parameter list and launch bounds of one kernel from .nv.info.<kernel>.
Status ReadKernelInfo(const ElfSection& section, const std::string& where, KernelInfo* k) {
  FLYT_ASSIGN_OR_RETURN(auto records, ReadRecords(section, where));
  std::map<uint32_t, KernelParam> v1, v2;
  std::optional<uint32_t> cbank_param_bytes, param_cbank_bytes;
  std::optional<uint64_t> max_threads, reqntid;
  for (const Record& r : records) {
    switch (r.attribute) {
      case kAttrKparamInfo:
      case kAttrKparamInfoV2: {
        // u32 index, u16 ordinal, u16 offset, then V1: u32 with the size in bits 18-31;
        // V2: u32 size.
        FLYT_RETURN_IF_ERROR(NeedPayload(r, 12, where));
        KernelParam p;
        p.ordinal = Load<uint16_t>(r.payload, 4);
        p.offset = Load<uint16_t>(r.payload, 6);
        const auto word = Load<uint32_t>(r.payload, 8);
        p.size_bytes = r.attribute == kAttrKparamInfo ? word >> 18 : word;
        if (p.ordinal >= kMaxParams || p.size_bytes > kMaxParams) {
          return InvalidArgument(where + ": parameter record at " + Hex(r.offset) +
                                 " has ordinal " + std::to_string(p.ordinal) + " and size " +
                                 std::to_string(p.size_bytes) + ", beyond CUDA's limits");
        }
        auto& into = r.attribute == kAttrKparamInfo ? v1 : v2;
        if (!into.emplace(p.ordinal, p).second) {
          return InvalidArgument(where + ": parameter " + std::to_string(p.ordinal) +
                                 " is described twice (record at " + Hex(r.offset) + ")");
        }
        break;
      }
      case kAttrCbankParamSize:
        if (r.format != kFmtHval) {
          return InvalidArgument(where + ": EIATTR_CBANK_PARAM_SIZE at " + Hex(r.offset) +
                                 " has format " + std::to_string(r.format) + ", expected 3");
        }
        cbank_param_bytes = r.value;
        break;
      case kAttrParamCbank:
        FLYT_RETURN_IF_ERROR(NeedPayload(r, 8, where));
        param_cbank_bytes = Load<uint16_t>(r.payload, 6);
        break;
      case kAttrMaxThreads:
      case kAttrReqntid: {
        FLYT_RETURN_IF_ERROR(NeedPayload(r, 12, where));
        uint64_t threads = 1;
        for (int i = 0; i < 3; ++i) {
          if (!internal::CheckedMul(threads, Load<uint32_t>(r.payload, 4 * i), &threads)) {
            threads = UINT64_MAX;  // refused below
            break;
          }
        }
        (r.attribute == kAttrReqntid ? reqntid : max_threads) = threads;
        break;
      }
      default:
        break;
    }
  }
  // V2 records (written for large parameters) take precedence over V1 for the same ordinal.
  for (auto& [ordinal, p] : v2) v1[ordinal] = p;
  uint64_t end_of_params = 0;
  uint32_t expected = 0;
  for (const auto& [ordinal, p] : v1) {
    if (ordinal != expected) {
      return InvalidArgument(where + ": parameter " + std::to_string(expected) +
                             " is missing (the next described is " + std::to_string(ordinal) + ")");
    }
    ++expected;
    end_of_params = std::max<uint64_t>(end_of_params, uint64_t{p.offset} + p.size_bytes);
    k->params.push_back(p);
  }
  if (cbank_param_bytes) {
    k->param_bytes = *cbank_param_bytes;
  } else if (param_cbank_bytes) {
    k->param_bytes = *param_cbank_bytes;
  } else {
    k->param_bytes = static_cast<uint32_t>(end_of_params);
  }
  if (end_of_params > k->param_bytes) {
    return InvalidArgument(where + ": parameters end at byte " + std::to_string(end_of_params) +
                           " but the parameter buffer is " + std::to_string(k->param_bytes) +
                           " bytes");
  }
  const std::optional<uint64_t> threads = reqntid ? reqntid : max_threads;
  if (threads) {
    if (*threads == 0 || *threads > UINT32_MAX) {
      return InvalidArgument(where + ": launch bound of " + std::to_string(*threads) +
                             " threads is out of range");
    }
    k->max_threads_per_block = static_cast<uint32_t>(*threads);
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<KernelInfo>> ParseCubin(std::span<const std::byte> bytes, uint32_t sm_arch) {
  FLYT_ASSIGN_OR_RETURN(ElfFile elf, ElfFile::Parse(bytes, "cubin"));
  if (elf.machine() != kElfMachineCuda) {
    return InvalidArgument("cubin: e_machine " + std::to_string(elf.machine()) +
                           " is not EM_CUDA (190)");
  }
  if (sm_arch == 0) sm_arch = SmOfFlags(elf);
  FLYT_ASSIGN_OR_RETURN(ModuleInfo module, ReadModuleInfo(elf, "cubin"));
  FLYT_ASSIGN_OR_RETURN(std::vector<ElfSymbol> symbols, elf.Symbols());
  bool reserves_shared = false;
  for (const ElfSection& s : elf.sections()) {
    if (s.name.starts_with(".nv.shared.reserved.")) reserves_shared = true;
  }
  for (const ElfSymbol& sym : symbols) {
    if (sym.name.starts_with(".nv.reservedSmem.")) reserves_shared = true;
  }

  std::vector<KernelInfo> kernels;
  for (const ElfSymbol& sym : symbols) {
    if (sym.type() != kSttFunc || (sym.other & kStoCudaEntry) == 0 || sym.section == 0) continue;
    const std::string name(sym.name);
    const std::string where = "cubin: kernel " + name;
    if (name.empty())
      return InvalidArgument("cubin: kernel symbol " + std::to_string(sym.index) + " has no name");
    KernelInfo k;
    k.name = name;
    k.sm_arch = sm_arch;
    const ElfSection* info = elf.FindSection(".nv.info." + name);
    if (info == nullptr || info->type != kSectionCudaInfo) {
      return InvalidArgument(where + ": no .nv.info." + name +
                             " section, so its parameter layout is unknown");
    }
    FLYT_RETURN_IF_ERROR(ReadKernelInfo(*info, where, &k));

    if (auto it = module.registers.find(sym.index); it != module.registers.end()) {
      k.registers = it->second;
    } else if (const uint32_t from_text = elf.sections()[sym.section].info >> 24; from_text != 0) {
      k.registers = from_text;
    }
    if (auto it = module.frame_bytes.find(sym.index); it != module.frame_bytes.end()) {
      k.local_bytes = it->second;
    }
    uint64_t shared = 0;
    if (const ElfSection* s = elf.FindSection(".nv.shared." + name)) {
      shared = s->size_bytes;
      if (reserves_shared && shared >= kReservedSharedBytes) shared -= kReservedSharedBytes;
    }
    if (const ElfSection* c = elf.FindSection(".nv.constant0." + name)) {
      if (c->size_bytes > UINT32_MAX) {
        return InvalidArgument(where + ": constant bank 0 of " + std::to_string(c->size_bytes) +
                               " bytes is implausible");
      }
      k.const_bytes = static_cast<uint32_t>(c->size_bytes);
    }
    if (shared > UINT32_MAX) {
      return InvalidArgument(where + ": static shared memory of " + std::to_string(shared) +
                             " bytes is implausible");
    }
    k.static_shared_bytes = static_cast<uint32_t>(shared);
    kernels.push_back(std::move(k));
  }
  std::sort(kernels.begin(), kernels.end(),
            [](const KernelInfo& a, const KernelInfo& b) { return a.name < b.name; });
  for (size_t i = 1; i < kernels.size(); ++i) {
    if (kernels[i].name == kernels[i - 1].name) {
      return InvalidArgument("cubin: kernel " + kernels[i].name + " is defined twice");
    }
  }
  return kernels;
}

}  // namespace flyt::cuda
