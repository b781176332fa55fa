// What a user sees of GPU usage profiles: the STATE column of `flytctl gpus` (node and cluster
// sources) and `flytctl profile`'s list and detail, from profiles in the JSON the node manager
// sends (profile/json.h).
#include <gtest/gtest.h>

#include "ctl/profile_testing.h"
#include "ctl/render.h"

namespace flyt::ctl {
namespace {

using nlohmann::json;

json ProfilesAnswer() {
  json list = json::array();
  for (const auto& p : test::SampleProfiles()) list.push_back(profile::ToJson(p));
  return {{"profiles", list}, {"footprint_bytes_per_gpu", 200000}};
}

TEST(ProfileRenderTest, TheStateCellShowsThePeriodAndTheIdleTimeFromEitherForm) {
  const auto profiles = test::SampleProfiles();
  EXPECT_EQ(ProfileStateText(profile::ToJson(profiles[0])), "cyclic 12.0s");
  EXPECT_EQ(ProfileStateText(profile::SummaryJson(profiles[0])), "cyclic 12.0s");
  EXPECT_EQ(ProfileStateText(profile::ToJson(profiles[1])), "allocated-idle 12m05s");
  EXPECT_EQ(ProfileStateText(profile::SummaryJson(profiles[1])), "allocated-idle 12m05s");
  EXPECT_EQ(ProfileStateText(profile::SummaryJson(profiles[2])), "unknown");
  EXPECT_EQ(ProfileStateText(json()), "-");
  EXPECT_EQ(ProfileStateText({{"state", 3}}), "-");
}

TEST(ProfileRenderTest, ANodesGpuTableEndsWithTheStateColumn) {
  gpu::GpuSnapshot s;
  for (uint32_t i = 0; i < 2; ++i) {
    gpu::GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.gpu_util_percent = 97;
    s.gpus.push_back(g);
  }
  RenderOptions o;
  o.show_state = true;
  o.states[0] = "cyclic 12.0s";
  std::string out = RenderSnapshot(s, o);
  EXPECT_NE(test::LineWith(out, "GPU  NAME").find("PROCS  STATE"), std::string::npos) << out;
  EXPECT_NE(test::LineWith(out, "  0  NVIDIA").find("    0  cyclic 12.0s"), std::string::npos) << out;
  const std::string second = test::LineWith(out, "  1  NVIDIA");
  EXPECT_EQ(second.substr(second.size() - 3), "  -") << out;  // no profile: "-"
  // This machine's GPUs (no profiles): no column, and the line ends as it always did.
  out = RenderSnapshot(s, {});
  EXPECT_EQ(out.find("STATE"), std::string::npos);
  EXPECT_NE(out.find("97%"), std::string::npos);
  EXPECT_EQ(test::LineWith(out, "  0  NVIDIA").back(), '0');
}

TEST(ProfileRenderTest, TheClusterGpuTableShowsAllocationAndState) {
  const auto profiles = test::SampleProfiles();
  json gpus = {{"gpus",
                {{{"node", "node-a"}, {"index", 0}, {"name", "NVIDIA H100 80GB HBM3"},
                  {"allocation_state", "free"}, {"profile", profile::ToJson(profiles[0])}},
                 {{"node", "node-a"}, {"index", 1}, {"name", "NVIDIA H100 80GB HBM3"},
                  {"allocation_state", "unreachable"}, {"profile", profile::ToJson(profiles[1])}},
                 {{"node", "node-b"}, {"index", 0}, {"name", "NVIDIA H100 80GB HBM3"},
                  {"allocation_state", "free"}, {"profile", nullptr}}}}};
  std::string out = RenderClusterGpus(gpus, json());
  EXPECT_NE(out.find("ALLOCATION  STATE"), std::string::npos) << out;
  EXPECT_NE(test::LineWith(out, "node-a             0").find("free        cyclic 12.0s"),
            std::string::npos)
      << out;
  EXPECT_NE(test::LineWith(out, "node-a             1").find("unreachable allocated-idle 12m05s"),
            std::string::npos)
      << out;
  EXPECT_NE(test::LineWith(out, "node-b").find("free        -"), std::string::npos) << out;
}

TEST(ProfileRenderTest, TheListHasOneLinePerGpuWithWhyAndWhoHoldsIt) {
  std::string out = RenderProfiles(ProfilesAnswer());
  EXPECT_NE(out.find("GPU  NAME       STATE"), std::string::npos) << out;
  const std::string cyclic = test::LineWith(out, "cyclic 12.0s");
  EXPECT_NE(cyclic.find("H100"), std::string::npos) << out;
  EXPECT_NE(cyclic.find("5m10s"), std::string::npos) << out;
  EXPECT_NE(cyclic.find("97%"), std::string::npos) << out;
  EXPECT_NE(cyclic.find("41.0 GiB"), std::string::npos) << out;
  EXPECT_NE(cyclic.find("39.0 GiB"), std::string::npos) << out;
  EXPECT_NE(test::LineWith(out, "allocated-idle 12m05s")
                .find("held by python (alice, pid 4242, 30.0 GiB)"),
            std::string::npos)
      << out;
  EXPECT_NE(test::LineWith(out, "  2  H100").find("unknown"), std::string::npos) << out;
  EXPECT_NE(test::LineWith(out, "  2  H100").find("no samples yet"), std::string::npos) << out;
  EXPECT_EQ(RenderProfiles({{"profiles", json::array()}}), "No GPU profiles.\n");
}

TEST(ProfileRenderTest, TheDetailOfACyclicGpu) {
  const std::string out = RenderProfile(profile::ToJson(test::SampleProfiles()[0]));
  EXPECT_EQ(out.rfind("GPU 0 (NVIDIA H100 80GB HBM3, GPU-00000000): cyclic 12.0s for 5m10s "
                      "(since 2026-11-22T06:04:50.000Z)\n",
                      0),
            0u)
      << out;
  EXPECT_NE(out.find("inputs: util, util_samples, memory_used, power (utilisation at 6.0 Hz); "
                     "2500 kernel launches/s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cycle: period 12.0 s, confidence 0.87 (autocorrelation, 25.0 cycles in "
                     "the window)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("phase (seconds after 2026-11-22T06:09:48.000Z): utilisation peak +3.0 s, "
                     "trough +9.5 s; memory peak +3.2 s, trough +9.6 s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("next utilisation trough: 2026-11-22T06:10:09.000Z"), std::string::npos);
  const std::string header = test::LineWith(out, "WINDOW");
  EXPECT_NE(header.find("UTIL P50 / P95 / P99"), std::string::npos) << out;
  const std::string hour = test::LineWith(out, "1h ");
  EXPECT_NE(hour.find("80% / 97% / 99%"), std::string::npos) << out;
  EXPECT_NE(hour.find("30.0 GiB / 40.0 GiB / 41.0 GiB"), std::string::npos) << out;
  EXPECT_NE(hour.find("300 W / 650 W / 690 W"), std::string::npos) << out;
  EXPECT_NE(out.find("memory: peak 41.0 GiB of 80.0 GiB over the last 36s, headroom 39.0 GiB"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("processes:\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  2026-11-22T06:04:40.000Z  idle -> cyclic: period 12.0 s"),
            std::string::npos)
      << out;
}

TEST(ProfileRenderTest, TheDetailOfAnAllocatedIdleAndAnUnknownGpu) {
  const auto profiles = test::SampleProfiles();
  std::string out = RenderProfile(profile::ToJson(profiles[1]));
  EXPECT_NE(out.find("allocated but idle for 12m05s, 30.0 GiB held by:"), std::string::npos)
      << out;
  const std::string holder = test::LineWith(out, "4242");
  EXPECT_NE(holder.find("python"), std::string::npos) << out;
  EXPECT_NE(holder.find("alice"), std::string::npos) << out;
  EXPECT_NE(holder.find("30.0 GiB"), std::string::npos) << out;
  EXPECT_NE(test::LineWith(out, "1m ").find("-"), std::string::npos) << out;  // no readings: "-"
  EXPECT_NE(out.find("phase changes: none seen"), std::string::npos) << out;
  out = RenderProfile(profile::ToJson(profiles[2]));
  EXPECT_NE(out.find("insufficient data: no samples yet"), std::string::npos) << out;
  EXPECT_EQ(out.find("cycle:"), std::string::npos) << out;
}

TEST(ProfileRenderTest, HostileTextDoesNotReachTheTerminal) {
  json p = profile::ToJson(test::SampleProfiles()[1]);
  p["allocated_idle"]["processes"][0]["name"] = "py\033]52;c;x\007";
  p["insufficient_data"] = "x\033[2J";
  std::string out = RenderProfile(p) + RenderProfiles({{"profiles", {p}}});
  EXPECT_EQ(out.find('\033'), std::string::npos);
  EXPECT_EQ(out.find('\007'), std::string::npos);
  for (const json& j : {json(), json::array(), json("x"), json({{"windows", 3}})}) {
    EXPECT_NO_THROW(RenderProfile(j));
    EXPECT_NO_THROW(RenderProfiles(j));
    EXPECT_NO_THROW(ProfileStateText(j));
  }
}

}  // namespace
}  // namespace flyt::ctl
