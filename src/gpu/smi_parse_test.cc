// Tests of the nvidia-smi fallback's CSV parsers: one case per field and fault of nvidia-smi's
// output (absent values, units, locales, a lost GPU), each beside the recorded output it parses
// (tests/data/nvidia-smi). The backend's own tests (queries, rejected fields, failures) are
// smi_backend_test.cc.
#include "gpu/smi_backend.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "gpu/smi_testing.h"

namespace flyt::gpu {
namespace {

using smi_test::FieldsWithout;
using smi_test::kMiB;
using smi_test::ReadData;

// --- ParseSmiGpuCsv on captured outputs -------------------------------------------------------

TEST(ParseSmiGpuCsvTest, EightH100s) {
  std::string problems;
  std::optional<std::string> driver;
  auto gpus = ParseSmiGpuCsv(ReadData("h100x8/gpus.csv"), SmiGpuFields(), &problems, &driver);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  EXPECT_EQ(driver, "570.133.20");
  ASSERT_EQ(gpus->size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*gpus)[i].index, i);
    EXPECT_EQ((*gpus)[i].name, "NVIDIA H100 80GB HBM3");
    EXPECT_FALSE((*gpus)[i].lost);
  }

  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.uuid, "GPU-32f43199-39a3-ff78-f534-bb179cea074b");
  EXPECT_EQ(g.pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(g.serial, "1652923012871");
  EXPECT_EQ(g.memory_total_bytes, 81559 * kMiB);
  EXPECT_EQ(g.memory_used_bytes, 72941 * kMiB);
  EXPECT_EQ(g.memory_free_bytes, 8087 * kMiB);
  EXPECT_EQ(g.memory_reserved_bytes, 531 * kMiB);
  EXPECT_EQ(g.gpu_util_percent, 100u);
  EXPECT_EQ(g.memory_util_percent, 56u);
  EXPECT_EQ(g.temperature_c, 63u);
  EXPECT_EQ(g.power_draw_mw, 688190u);
  EXPECT_EQ(g.power_limit_mw, 700000u);
  EXPECT_EQ(g.sm_clock_mhz, 1980u);
  EXPECT_EQ(g.memory_clock_mhz, 2619u);
  EXPECT_EQ(g.max_sm_clock_mhz, 1980u);
  EXPECT_EQ(g.max_memory_clock_mhz, 2619u);
  EXPECT_EQ(g.fan_speed_percent, std::nullopt);  // datacenter boards have no fan of their own
  EXPECT_EQ(g.performance_state, 0u);
  EXPECT_EQ(g.compute_mode, "default");
  EXPECT_EQ(g.ecc.volatile_corrected, 0u);
  EXPECT_EQ(g.ecc.volatile_uncorrected, 0u);
  EXPECT_EQ(g.ecc.aggregate_corrected, 0u);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, 0u);
  EXPECT_TRUE(g.processes.empty());

  EXPECT_EQ((*gpus)[3].ecc.aggregate_corrected, 3u);
  EXPECT_EQ((*gpus)[6].memory_used_bytes, 1 * kMiB);  // idle GPU: 1 MiB, not absent
  EXPECT_EQ((*gpus)[6].gpu_util_percent, 0u);         // idle is 0, not absent
  EXPECT_EQ((*gpus)[6].sm_clock_mhz, 345u);
  EXPECT_EQ((*gpus)[7].pci_bus_id, "00000000:DB:00.0");
}

TEST(ParseSmiGpuCsvTest, A100InMigModeHasNoUtilization) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("a100-mig/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(gpus->size(), 2u);

  const GpuInfo& mig = (*gpus)[0];
  EXPECT_EQ(mig.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(mig.gpu_util_percent, std::nullopt);
  EXPECT_EQ(mig.memory_util_percent, std::nullopt);
  EXPECT_EQ(mig.memory_total_bytes, 40960 * kMiB);
  EXPECT_EQ(mig.memory_used_bytes, 11008 * kMiB);
  EXPECT_EQ(mig.power_draw_mw, 88410u);
  EXPECT_EQ(mig.power_limit_mw, 400000u);
  EXPECT_EQ(mig.max_sm_clock_mhz, 1410u);
  EXPECT_EQ(mig.max_memory_clock_mhz, 1215u);

  const GpuInfo& plain = (*gpus)[1];
  EXPECT_EQ(plain.gpu_util_percent, 0u);
  EXPECT_EQ(plain.memory_util_percent, 0u);
  EXPECT_EQ(plain.sm_clock_mhz, 210u);
}

TEST(ParseSmiGpuCsvTest, MixedV100AndT4OnDriverWithoutMemoryReserved) {
  std::string problems;
  std::optional<std::string> driver;
  auto gpus = ParseSmiGpuCsv(ReadData("v100-t4-r470/gpus.csv"), FieldsWithout("memory.reserved"),
                             &problems, &driver);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  EXPECT_EQ(driver, "470.256.02");
  ASSERT_EQ(gpus->size(), 4u);

  const GpuInfo& v100 = (*gpus)[0];
  EXPECT_EQ(v100.name, "Tesla V100-PCIE-32GB");
  EXPECT_EQ(v100.memory_total_bytes, 32510 * kMiB);
  EXPECT_EQ(v100.memory_used_bytes, 30211 * kMiB);
  EXPECT_EQ(v100.memory_free_bytes, 2299 * kMiB);
  EXPECT_EQ(v100.memory_reserved_bytes, std::nullopt);  // not asked: absent, not 0
  EXPECT_EQ(v100.power_draw_mw, 237460u);
  EXPECT_EQ(v100.power_limit_mw, 250000u);
  EXPECT_EQ((*gpus)[1].ecc.aggregate_corrected, 1u);

  const GpuInfo& idle_t4 = (*gpus)[2];
  EXPECT_EQ(idle_t4.name, "Tesla T4");
  EXPECT_EQ(idle_t4.pci_bus_id, "00000000:AF:00.0");
  EXPECT_EQ(idle_t4.performance_state, 8u);
  EXPECT_EQ(idle_t4.power_draw_mw, 9670u);
  EXPECT_EQ(idle_t4.power_limit_mw, 70000u);
  EXPECT_EQ(idle_t4.max_memory_clock_mhz, 5001u);
  EXPECT_EQ((*gpus)[3].compute_mode, "exclusive_process");

  // Read with the full field list, every row is one column short: that is why the backend
  // retries without the rejected field rather than parsing what an old driver printed.
  std::string full_problems;
  auto wrong = ParseSmiGpuCsv(ReadData("v100-t4-r470/gpus.csv"), SmiGpuFields(), &full_problems);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(full_problems.find("line 1: expected 26 columns, found 25"), std::string::npos)
      << full_problems;
}

TEST(ParseSmiGpuCsvTest, UnifiedMemoryGpuHasNoMemoryReadingsButTheRestStands) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("gb10-unified/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(gpus->size(), 1u);
  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.name, "NVIDIA GB10");
  EXPECT_EQ(g.pci_bus_id, "0000000F:01:00.0");
  EXPECT_EQ(g.memory_total_bytes, std::nullopt);
  EXPECT_EQ(g.memory_used_bytes, std::nullopt);
  EXPECT_EQ(g.memory_free_bytes, std::nullopt);
  EXPECT_EQ(g.memory_reserved_bytes, std::nullopt);
  EXPECT_EQ(g.MemoryUsagePercent(), std::nullopt);
  EXPECT_EQ(g.gpu_util_percent, 96u);
  EXPECT_EQ(g.temperature_c, 61u);
  EXPECT_EQ(g.power_draw_mw, 38270u);
  EXPECT_EQ(g.power_limit_mw, std::nullopt);
  EXPECT_EQ(g.sm_clock_mhz, 2418u);
  EXPECT_EQ(g.memory_clock_mhz, std::nullopt);
  EXPECT_EQ(g.serial, std::nullopt);
  EXPECT_EQ(g.ecc.volatile_corrected, std::nullopt);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, std::nullopt);
}

TEST(ParseSmiGpuCsvTest, GeForceHasFanButNoEccOrSerial) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("rtx4090/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(gpus->size(), 1u);
  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(g.fan_speed_percent, 42u);
  EXPECT_EQ(g.serial, std::nullopt);
  EXPECT_EQ(g.ecc.volatile_corrected, std::nullopt);
  EXPECT_EQ(g.ecc.volatile_uncorrected, std::nullopt);
  EXPECT_EQ(g.ecc.aggregate_corrected, std::nullopt);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, std::nullopt);
  EXPECT_EQ(g.memory_total_bytes, 24564 * kMiB);
  EXPECT_EQ(g.memory_reserved_bytes, 396 * kMiB);
  EXPECT_EQ(g.performance_state, 2u);
  EXPECT_EQ(g.power_draw_mw, 212640u);
  EXPECT_EQ(g.power_limit_mw, 450000u);
  EXPECT_EQ(g.max_sm_clock_mhz, 3120u);
}

TEST(ParseSmiGpuCsvTest, EverySpellingOfNoValueIsAbsentAndTheRowStands) {
  const std::vector<std::string> fields = {"index", "uuid", "memory.used", "temperature.gpu"};
  for (const char* token :
       {"[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[GPU requires reset]",
        "[Insufficient Permissions]", "", "Unknown Error", "[Not Found]"}) {
    std::string problems;
    std::string text =
        "0, GPU-0d3e0f52-0d1a-4a7c-9d3b-0a51f1c5d2e1, " + std::string(token) + ", 44\n";
    auto gpus = ParseSmiGpuCsv(text, fields, &problems);
    ASSERT_TRUE(gpus.ok()) << token << ": " << gpus.status().ToString();
    ASSERT_EQ(gpus->size(), 1u) << token;
    EXPECT_EQ((*gpus)[0].memory_used_bytes, std::nullopt) << token;
    EXPECT_EQ((*gpus)[0].temperature_c, 44u) << token;
    EXPECT_FALSE((*gpus)[0].lost) << token;
    EXPECT_EQ(problems, "") << token;
  }
}

TEST(ParseSmiGpuCsvTest, TruncatedRowIsReportedAndTheOthersKept) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("malformed-truncated/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[2].index, 2u);
  EXPECT_EQ(problems, "line 4: expected 26 columns, found 5");
}

TEST(ParseSmiGpuCsvTest, GarbageNumberNamesLineAndColumn) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("malformed-garbage/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[0].index, 0u);
  EXPECT_EQ((*gpus)[1].index, 2u);
  EXPECT_EQ((*gpus)[2].index, 3u);
  EXPECT_EQ(problems, "line 2, column 7 (memory.used): \"72941 MiB\" is not a number");
}

TEST(ParseSmiGpuCsvTest, WrongColumnCountIsReportedAndTheOthersKept) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("malformed-columns/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[2].index, 3u);
  EXPECT_EQ(problems, "line 3: expected 26 columns, found 27");
}

TEST(ParseSmiGpuCsvTest, EmptyOutputHasNoGpusAndNoProblems) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("empty/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_TRUE(gpus->empty());
  EXPECT_EQ(problems, "");
}

TEST(ParseSmiGpuCsvTest, NoUsableRowIsAnError) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv("0, GPU-a, 12\nnonsense\n", SmiGpuFields(), &problems);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpus.status().message().find("line 1: expected 26 columns, found 3"), std::string::npos)
      << gpus.status().message();
  EXPECT_NE(gpus.status().message().find("line 2: not a GPU row: nonsense"), std::string::npos);
}

TEST(ParseSmiGpuCsvTest, OtherBadNumbersAreReported) {
  const std::vector<std::string> fields = {"index", "uuid", "power.draw", "pstate",
                                           "temperature.gpu"};
  struct Case {
    const char* row;
    const char* problem;
  };
  for (const Case& c : {
           Case{"x1, GPU-a, 1.0, P0, 40", "line 1, column 1 (index): \"x1\" is not a number"},
           // "12,5" has no space after its comma: one cell, and not a number.
           Case{"0, GPU-a, 12,5, P0, 40",
                "line 1, column 3 (power.draw): \"12,5\" is not a number"},
           Case{"0, GPU-a, -3.5, P0, 40",
                "line 1, column 3 (power.draw): \"-3.5\" is out of range"},
           Case{"0, GPU-a, 1.0, P16, 40",
                "line 1, column 4 (pstate): \"P16\" is not a performance state (P0..P15)"},
           Case{"0, GPU-a, 1.0, P0, 99999999999",
                "line 1, column 5 (temperature.gpu): \"99999999999\" is out of range"},
           Case{"[N/A], GPU-a, 1.0, P0, 40", "line 1: GPU index unreadable ([N/A]); row left out"},
       }) {
    std::string problems;
    auto gpus = ParseSmiGpuCsv(std::string(c.row) + "\n", fields, &problems);
    EXPECT_FALSE(gpus.ok()) << c.row;
    EXPECT_EQ(problems, c.problem) << c.row;
  }
}

TEST(ParseSmiGpuCsvTest, PowerIsRoundedToWholeMilliwatts) {
  const std::vector<std::string> fields = {"index", "uuid", "power.draw", "power.limit"};
  std::string problems;
  auto gpus = ParseSmiGpuCsv("0, GPU-a, 69.88, 300.0\n1, GPU-b, 0.0005, 1e3\n", fields, &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].power_draw_mw, 69880u);
  EXPECT_EQ((*gpus)[0].power_limit_mw, 300000u);
  EXPECT_EQ((*gpus)[1].power_draw_mw, 1u);
  EXPECT_EQ((*gpus)[1].power_limit_mw, 1000000u);
}

TEST(ParseSmiGpuCsvTest, LostGpuKeepsItsIdentityAndNoReadings) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("gpu-lost/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_FALSE((*gpus)[0].lost);
  EXPECT_FALSE((*gpus)[1].lost);
  const GpuInfo& lost = (*gpus)[2];
  EXPECT_TRUE(lost.lost);
  EXPECT_EQ(lost.index, 2u);
  EXPECT_EQ(lost.uuid, "GPU-7768310c-a603-2f55-313e-877bd86dfcbd");
  EXPECT_EQ(lost.pci_bus_id, "00000000:3A:00.0");
  EXPECT_EQ(lost.memory_total_bytes, std::nullopt);
  EXPECT_EQ(lost.temperature_c, std::nullopt);
  EXPECT_EQ(lost.power_draw_mw, std::nullopt);
  // The GPU nvidia-smi had no handle for is named in the problems, as nvidia-smi said it.
  EXPECT_EQ(problems,
            "line 4: not a GPU row: Unable to determine the device handle for GPU "
            "00000000:5D:00.0: GPU is lost.  Reboot the system to recover this GPU");
}

TEST(ParseSmiGpuCsvTest, LostReadingsFromARowWithNumbersAreDropped) {
  const std::vector<std::string> fields = {"index", "uuid", "temperature.gpu", "power.draw"};
  auto gpus = ParseSmiGpuCsv("4, GPU-e, 55, [GPU is lost]\n", fields, nullptr);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_TRUE((*gpus)[0].lost);
  EXPECT_EQ((*gpus)[0].temperature_c, std::nullopt);
}

TEST(ParseSmiGpuCsvTest, UnreadableUuidKeepsTheGpuAndSaysSo) {
  const std::vector<std::string> fields = {"index", "uuid", "temperature.gpu"};
  std::string problems;
  auto gpus = ParseSmiGpuCsv("0, [Unknown Error], 40\n", fields, &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].uuid, "");
  EXPECT_EQ((*gpus)[0].temperature_c, 40u);
  EXPECT_EQ(problems,
            "line 1: GPU 0 uuid unreadable ([Unknown Error]); its processes cannot be attached");
}

TEST(ParseSmiGpuCsvTest, FieldsMustIdentifyTheGpu) {
  auto gpus = ParseSmiGpuCsv("0, 40\n", {"index", "temperature.gpu"}, nullptr);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpus.status().message().find("uuid"), std::string::npos);
}

TEST(ParseSmiGpuCsvTest, CrLfLineEndingsAreAccepted) {
  const std::vector<std::string> fields = {"index", "uuid", "compute_mode"};
  auto gpus =
      ParseSmiGpuCsv("0, GPU-a, Prohibited\r\n1, GPU-b, Exclusive_Thread\r\n", fields, nullptr);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].compute_mode, "prohibited");
  EXPECT_EQ((*gpus)[1].compute_mode, "exclusive_thread");
}

// --- ParseSmiAppsCsv ---------------------------------------------------------------------------

TEST(ParseSmiAppsCsvTest, NamesWithSpacesAndCommasSurvive) {
  std::string problems;
  auto apps = ParseSmiAppsCsv(ReadData("h100x8/apps.csv"), &problems);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(apps->size(), 8u);

  const auto& [first_uuid, first] = (*apps)[0];
  EXPECT_EQ(first_uuid, "GPU-32f43199-39a3-ff78-f534-bb179cea074b");
  EXPECT_EQ(first.pid, 48211u);
  EXPECT_EQ(first.type, ProcessType::kCompute);
  EXPECT_EQ(first.used_memory_bytes, 72418 * kMiB);
  EXPECT_EQ(first.name, "python3");
  EXPECT_EQ(first.command, "/usr/bin/python3");

  const auto& [render_uuid, render] = (*apps)[7];
  EXPECT_EQ(render_uuid, "GPU-12f7abf6-2134-07b6-29c8-aaa537ab4395");
  EXPECT_EQ(render.pid, 52210u);
  EXPECT_EQ(render.command, "/opt/Render Farm, Inc/bin/render worker");
  EXPECT_EQ(render.name, "render worker");
  EXPECT_EQ(render.used_memory_bytes, 6144 * kMiB);
}

TEST(ParseSmiAppsCsvTest, UnknownUsedMemoryIsAbsent) {
  std::string problems;
  auto apps = ParseSmiAppsCsv(ReadData("a100-mig/apps.csv"), &problems);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(apps->size(), 2u);
  EXPECT_EQ((*apps)[0].second.pid, 91822u);
  EXPECT_EQ((*apps)[0].second.used_memory_bytes, std::nullopt);
  EXPECT_EQ((*apps)[1].second.name, "tritonserver");
}

TEST(ParseSmiAppsCsvTest, BadRowsAreReportedAndTheOthersKept) {
  const std::string text =
      "GPU-a, abc, /usr/bin/python3, 12\n"
      "GPU-a, 12, /usr/bin/python3\n"
      "[N/A], 55, /usr/bin/python3, 3\n"
      "GPU-a, 77, /usr/bin/python3, 1.5\n"
      "GPU-b, 901, [N/A], 100\n";
  std::string problems;
  auto apps = ParseSmiAppsCsv(text, &problems);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].first, "GPU-b");
  EXPECT_EQ((*apps)[0].second.pid, 901u);
  EXPECT_EQ((*apps)[0].second.name, std::nullopt);
  EXPECT_EQ((*apps)[0].second.command, std::nullopt);
  EXPECT_EQ(problems,
            "line 1, column 2 (pid): \"abc\" is not a number; "
            "line 2: expected 4 columns (gpu_uuid, pid, process_name, used_memory): "
            "GPU-a, 12, /usr/bin/python3; "
            "line 3: process 55 has no GPU uuid ([N/A]); "
            "line 4, column 4 (used_memory): \"1.5\" is not a number");
}

TEST(ParseSmiAppsCsvTest, OldStyleMigUuidMapsToItsGpu) {
  auto apps = ParseSmiAppsCsv(
      "MIG-GPU-0deb68ce-98a4-11dd-c381-739dae57b98b/3/0, 4242, /usr/bin/python3, 4864\n", nullptr);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].first, "GPU-0deb68ce-98a4-11dd-c381-739dae57b98b");
  EXPECT_EQ((*apps)[0].second.gpu_instance_id, 3u);
  EXPECT_EQ((*apps)[0].second.compute_instance_id, 0u);
}

TEST(ParseSmiAppsCsvTest, EmptyNameAndEmptyOutput) {
  auto apps = ParseSmiAppsCsv("GPU-a, 10, , 20\n", nullptr);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].second.name, std::nullopt);
  EXPECT_EQ((*apps)[0].second.used_memory_bytes, 20 * kMiB);

  auto none = ParseSmiAppsCsv("", nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  auto garbage = ParseSmiAppsCsv("No running processes found\n", nullptr);
  EXPECT_FALSE(garbage.ok());
}

TEST(SmiRejectedFieldTest, ReadsNvidiaSmisAnswer) {
  EXPECT_EQ(SmiRejectedField(ReadData("v100-t4-r470/field-error.txt")), "memory.reserved");
  EXPECT_EQ(SmiRejectedField("Field \xE2\x80\x9C"
                             "encoder.stats.sessionCount\xE2\x80\x9D"
                             " is not a valid field to query.\n"),
            "encoder.stats.sessionCount");
  EXPECT_EQ(SmiRejectedField(ReadData("h100x8/gpus.csv")), std::nullopt);
  EXPECT_EQ(SmiRejectedField(""), std::nullopt);
}

// --- SmiBackend with an in-process runner ------------------------------------------------------

}  // namespace
}  // namespace flyt::gpu
