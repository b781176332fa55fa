#include "ctl/cuda_inspect.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/strings.h"
#include "ctl/render.h"
#include "cuda/elf.h"

namespace flyt::ctl {
namespace {

// A host binary may be large (libcublasLt carries hundreds of MiB of device code).
constexpr size_t kMaxInputBytes = size_t{2} << 30;
// Longer mangled names are shown as they are: the demangler recurses on nesting.
constexpr size_t kMaxDemangleChars = 4096;

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string Demangle(const std::string& name) {
  if (name.size() > kMaxDemangleChars || !name.starts_with("_Z")) return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out != nullptr ? std::string(out.get()) : name;
}

Status AddContainers(std::span<const std::byte> bytes, const std::string& section,
                     CudaInspection* out) {
  FLYT_ASSIGN_OR_RETURN(auto spans, cuda::SplitFatbins(bytes));
  for (std::span<const std::byte> span : spans) {
    CudaContainer c;
    c.section = section;
    c.offset = static_cast<uint64_t>(span.data() - bytes.data());
    const std::string where =
        (section.empty() ? std::string("container") : section + " container") + " at offset " +
        fmt::format("{:#x}", c.offset);
    auto fatbin = cuda::ParseFatbin(span);
    if (!fatbin.ok()) return fatbin.status().WithContext(where);
    c.fatbin = std::move(fatbin).value();
    auto kernels = cuda::KernelsOf(c.fatbin);
    if (!kernels.ok()) return kernels.status().WithContext(where);
    c.kernels = std::move(kernels).value();
    out->containers.push_back(std::move(c));
  }
  return Status::Ok();
}

std::string Opt(const std::optional<uint32_t>& v) { return v ? std::to_string(*v) : "-"; }
std::string OptBytes(const std::optional<uint32_t>& v) {
  return v ? std::to_string(*v) + " B" : "-";
}

nlohmann::json OptJson(const std::optional<uint32_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string KindName(const cuda::FatbinEntry& e) {
  return e.kind == cuda::FatbinEntry::Kind::kPtx ? "PTX" : "ELF";
}

std::string ArchName(const cuda::FatbinEntry& e) {
  return (e.kind == cuda::FatbinEntry::Kind::kPtx ? "compute_" : "sm_") + std::to_string(e.sm_arch);
}

}  // namespace

Result<CudaInspection> InspectCuda(std::span<const std::byte> bytes, std::string_view path) {
  CudaInspection out;
  out.path = std::string(path);
  if (bytes.size() >= 4 && std::memcmp(bytes.data(),
                                       "\x7f"
                                       "ELF",
                                       4) == 0) {
    FLYT_ASSIGN_OR_RETURN(cuda::ElfFile elf, cuda::ElfFile::Parse(bytes, out.path));
    if (elf.machine() == cuda::kElfMachineCuda) {
      out.format = "cubin";
      CudaContainer c;
      auto kernels = cuda::ParseCubin(bytes);
      if (!kernels.ok()) return kernels.status().WithContext(out.path);
      c.kernels = std::move(kernels).value();
      out.containers.push_back(std::move(c));
      return out;
    }
    out.format = "host ELF";
    bool found = false;
    for (const char* name : {".nv_fatbin", "__nv_relfatbin"}) {
      const cuda::ElfSection* s = elf.FindSection(name);
      if (s == nullptr) continue;
      if (s->type == cuda::kElfSectionNoBits) {
        return InvalidArgument(out.path + ": section " + name + " has no contents in the file");
      }
      found = true;
      FLYT_RETURN_IF_ERROR(AddContainers(s->data, name, &out).WithContext(out.path));
    }
    if (!found) {
      return NotFound(out.path +
                      ": no .nv_fatbin or __nv_relfatbin section (not built by nvcc with device "
                      "code, or stripped of it)");
    }
    return out;
  }
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  if (magic != cuda::kFatbinMagic && path.ends_with(".ptx")) {
    out.format = "ptx";
    CudaContainer c;
    auto kernels =
        cuda::ParsePtx(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (!kernels.ok()) return kernels.status().WithContext(out.path);
    c.kernels = std::move(kernels).value();
    out.containers.push_back(std::move(c));
    return out;
  }
  if (magic != cuda::kFatbinMagic) {
    return InvalidArgument(
        out.path + ": neither an ELF file nor a fatbin container (" +
        (bytes.size() < 4 ? std::string("too short") : fmt::format("starts with {:#010x}", magic)) +
        ")");
  }
  out.format = "fatbin";
  FLYT_RETURN_IF_ERROR(AddContainers(bytes, "", &out).WithContext(out.path));
  return out;
}

Result<CudaInspection> InspectCudaFile(const std::string& path) {
  FLYT_ASSIGN_OR_RETURN(std::string contents, ReadFile(path, kMaxInputBytes));
  return InspectCuda(AsBytes(contents), path);
}

std::string RenderCudaInspection(const CudaInspection& inspection) {
  std::string out;
  size_t kernel_count = 0;
  for (const CudaContainer& c : inspection.containers) kernel_count += c.kernels.size();
  // A lone cubin or PTX file has no container to describe.
  const bool cubin = inspection.format == "cubin" || inspection.format == "ptx";
  out += fmt::format("{}: {}, ", Printable(inspection.path), inspection.format);
  if (!cubin) {
    out += fmt::format("{} container{}, ", inspection.containers.size(),
                       inspection.containers.size() == 1 ? "" : "s");
  }
  out += fmt::format("{} kernel{}\n", kernel_count, kernel_count == 1 ? "" : "s");
  for (size_t ci = 0; ci < inspection.containers.size(); ++ci) {
    const CudaContainer& c = inspection.containers[ci];
    if (!cubin) {
      out += fmt::format("\ncontainer {} ({}{:#x}, {} bytes): {} entr{}", ci,
                         c.section.empty() ? "offset " : c.section + " + ", c.offset,
                         c.fatbin.size_bytes, c.fatbin.entries.size(),
                         c.fatbin.entries.size() == 1 ? "y" : "ies");
      if (c.fatbin.skipped_entries != 0) {
        out += fmt::format(", {} of other kinds skipped", c.fatbin.skipped_entries);
      }
      out += "\n";
      if (!c.fatbin.entries.empty()) {
        out += fmt::format("  {:<3} {:<4} {:<11} {:<11} {:>10} {:>10}\n", "#", "kind", "arch",
                           "compression", "stored", "size");
      }
      for (size_t ei = 0; ei < c.fatbin.entries.size(); ++ei) {
        const cuda::FatbinEntry& e = c.fatbin.entries[ei];
        out += fmt::format("  {:<3} {:<4} {:<11} {:<11} {:>10} {:>10}\n", ei, KindName(e),
                           ArchName(e), e.was_compressed ? e.compression : "-", e.stored_size_bytes,
                           e.payload.size());
      }
    }
    for (const cuda::KernelInfo& k : c.kernels) {
      const std::string demangled = Demangle(k.name);
      out += fmt::format("\n  kernel {}{}\n", Printable(k.name),
                         demangled == k.name ? "" : "  (" + Printable(demangled) + ")");
      out += fmt::format(
          "    {}_{}: registers {}, static shared {}, max threads {}, constant[0] {}, local {}\n",
          k.from_ptx ? "compute" : "sm", k.sm_arch, Opt(k.registers),
          OptBytes(k.static_shared_bytes), Opt(k.max_threads_per_block), OptBytes(k.const_bytes),
          OptBytes(k.local_bytes));
      out += fmt::format("    parameters: {}, {} bytes{}\n", k.params.size(), k.param_bytes,
                         k.from_ptx ? " (laid out from PTX)" : "");
      if (!k.params.empty()) {
        out += fmt::format("      {:>7} {:>7} {:>7}\n", "ordinal", "offset", "size");
        for (const cuda::KernelParam& p : k.params) {
          out += fmt::format("      {:>7} {:>7} {:>7}\n", p.ordinal, p.offset, p.size_bytes);
        }
      }
    }
  }
  return out;
}

nlohmann::json CudaInspectionToJson(const CudaInspection& inspection) {
  nlohmann::json containers = nlohmann::json::array();
  for (const CudaContainer& c : inspection.containers) {
    nlohmann::json entries = nlohmann::json::array();
    for (const cuda::FatbinEntry& e : c.fatbin.entries) {
      entries.push_back(
          {{"kind", KindName(e) == "PTX" ? "ptx" : "elf"},
           {"sm_arch", e.sm_arch},
           {"compression", e.was_compressed ? e.compression : "none"},
           {"stored_bytes", e.stored_size_bytes},
           {"size_bytes", e.payload.size()},
           {"flags", e.flags},
           {"version", std::to_string(e.version_major) + "." + std::to_string(e.version_minor)},
           {"object_name", SanitizeUtf8(e.object_name)},
           {"options", SanitizeUtf8(e.options)}});
    }
    nlohmann::json kernels = nlohmann::json::array();
    for (const cuda::KernelInfo& k : c.kernels) {
      nlohmann::json params = nlohmann::json::array();
      for (const cuda::KernelParam& p : k.params) {
        params.push_back(
            {{"ordinal", p.ordinal}, {"offset", p.offset}, {"size_bytes", p.size_bytes}});
      }
      kernels.push_back({{"name", SanitizeUtf8(k.name)},
                         {"demangled", SanitizeUtf8(Demangle(k.name))},
                         {"sm_arch", k.sm_arch},
                         {"from_ptx", k.from_ptx},
                         {"param_bytes", k.param_bytes},
                         {"params", std::move(params)},
                         {"registers", OptJson(k.registers)},
                         {"static_shared_bytes", OptJson(k.static_shared_bytes)},
                         {"max_threads_per_block", OptJson(k.max_threads_per_block)},
                         {"const_bytes", OptJson(k.const_bytes)},
                         {"local_bytes", OptJson(k.local_bytes)}});
    }
    nlohmann::json jc = {
        {"section", c.section}, {"offset", c.offset}, {"kernels", std::move(kernels)}};
    if (inspection.format == "host ELF" || inspection.format == "fatbin") {
      jc["size_bytes"] = c.fatbin.size_bytes;
      jc["entries"] = std::move(entries);
      jc["skipped_entries"] = c.fatbin.skipped_entries;
    }
    containers.push_back(std::move(jc));
  }
  return {{"path", SanitizeUtf8(inspection.path)},
          {"format", inspection.format},
          {"containers", std::move(containers)}};
}

}  // namespace flyt::ctl
