#include "sched/ledger.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace flyt::sched {
namespace {

constexpr uint64_t kGiB = 1ULL << 30;

std::vector<GpuState> Gpus(int n, uint64_t free_gib = 80, uint32_t util = 0,
                           const std::string& name = "NVIDIA H100 80GB HBM3") {
  std::vector<GpuState> out;
  for (int i = 0; i < n; ++i) {
    GpuState g;
    g.index = static_cast<uint32_t>(i);
    g.uuid = "GPU-" + name.substr(7, 4) + std::to_string(i);
    g.name = name;
    g.memory_total_bytes = 80 * kGiB;
    g.memory_free_bytes = free_gib * kGiB;
    g.utilization_percent = util;
    out.push_back(g);
  }
  return out;
}

// GPUs served remotely: 132 SMs granted in steps of 8 (an H100), shared (MPS) or not.
std::vector<GpuState> RemoteGpus(int n, bool shared, uint64_t free_gib = 80) {
  std::vector<GpuState> out = Gpus(n, free_gib);
  for (GpuState& g : out) {
    g.sm_count = 132;
    g.sm_granularity = 8;
    g.remote_capable = true;
    g.shared = shared;
  }
  return out;
}

RemoteRequest Share(uint32_t sms, uint64_t gib, const std::string& node = "") {
  RemoteRequest r;
  r.sm_count = sms;
  r.memory_bytes = gib * kGiB;
  r.node = node;
  return r;
}

class LedgerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Ledger ledger_{clock_};
};

TEST_F(LedgerTest, LeasedGpusAreNotOfferedAgainWhateverTheirUsage) {
  ledger_.UpdateNode("a", Gpus(2));
  AllocationRequest req;
  req.gpus = 2;
  auto first = ledger_.Allocate(req);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The GPUs still look idle (the job is loading its model), yet they are not offered again.
  ledger_.UpdateNode("a", Gpus(2));
  req.gpus = 1;
  auto second = ledger_.Allocate(req);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("a: 0 available, 2 leased"), std::string::npos)
      << second.status().message();
  ASSERT_TRUE(ledger_.Release(first->id).ok());
  EXPECT_TRUE(ledger_.Allocate(req).ok());
  EXPECT_FALSE(ledger_.Release("lease-999").ok());
}

TEST_F(LedgerTest, RefusalCountsTheReasonsPerNode) {
  auto b = Gpus(4, 80, 0);
  b[0].lost = true;
  b[1].memory_free_bytes = 10 * kGiB;
  b[2].utilization_percent = 95;
  b[3].utilization_percent.reset();  // unknown: never offered (fail closed)
  ledger_.UpdateNode("node-b", b);
  ledger_.UpdateNode("node-c", Gpus(2, 80, 0, "NVIDIA A100-SXM4-80GB"));
  AllocationRequest req;
  req.gpus = 1;
  req.min_free_memory_bytes = 40 * kGiB;
  req.max_utilization_percent = 90;
  req.gpu_model = "H100";
  auto r = ledger_.Allocate(req);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("node-b: 0 available, 1 below min_free_memory_mb, 1 above max_utilization, 1 "
                   "lost, 1 without memory/utilisation readings"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("node-c: 0 available, 2 of another model"), std::string::npos) << m;
}

TEST_F(LedgerTest, SharedLeasesCountAgainstFreeMemoryAtOnce) {
  ledger_.UpdateNode("a", Gpus(1, 70));
  AllocationRequest req;
  req.exclusive = false;
  req.min_free_memory_bytes = 30 * kGiB;
  EXPECT_TRUE(ledger_.Allocate(req).ok());
  EXPECT_TRUE(ledger_.Allocate(req).ok());  // 70 − 30 = 40 GiB still free
  auto third = ledger_.Allocate(req);       // 70 − 60 = 10 GiB
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("1 below min_free_memory_mb"), std::string::npos);
  req.exclusive = true;  // nor may an exclusive lease take a GPU that shared leases use
  req.min_free_memory_bytes = 0;
  EXPECT_FALSE(ledger_.Allocate(req).ok());
}

// Found by the random-sequence test: a shared lease that reserves no memory still holds the GPU
// against exclusive requests.
TEST_F(LedgerTest, ASharedLeaseOfZeroBytesStillBlocksExclusiveRequests) {
  ledger_.UpdateNode("a", Gpus(1));
  AllocationRequest shared;
  shared.exclusive = false;
  shared.min_free_memory_bytes = 0;
  ASSERT_TRUE(ledger_.Allocate(shared).ok());
  AllocationRequest exclusive;
  auto r = ledger_.Allocate(exclusive);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 leased"), std::string::npos) << r.status().message();
  EXPECT_TRUE(ledger_.Allocate(shared).ok());  // another shared one may join
}

TEST(LedgerRemote, GrantedSmsRoundUpToTheGranularityAndStayWithinTheGpu) {
  RemoteRequest r;
  r.sm_count = 60;
  EXPECT_EQ(GrantedSms(r, 132, 8), 64u);
  r.sm_count = 132;
  EXPECT_EQ(GrantedSms(r, 132, 8), 132u);  // rounded up past the total: capped at it
  r.sm_count = 133;
  EXPECT_EQ(GrantedSms(r, 132, 8), 0u);  // more than the GPU has: does not fit
  r.sm_count = 0;
  r.sm_percent = 25;  // 33 SMs, rounded up to 40
  EXPECT_EQ(GrantedSms(r, 132, 8), 40u);
  r.sm_percent = 100;
  EXPECT_EQ(GrantedSms(r, 132, 8), 132u);
  r.sm_percent = 0.1;
  EXPECT_EQ(GrantedSms(r, 132, 0), 1u);
}

TEST_F(LedgerTest, RemoteSharesFitInSmsAndMemoryOnASharedGpu) {
  ledger_.UpdateNode("a", RemoteGpus(1, /*shared=*/true));
  auto first = ledger_.AllocateRemote(Share(60, 30));  // 64 SMs granted
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->remote);
  EXPECT_FALSE(first->exclusive);
  ASSERT_EQ(first->gpus.size(), 1u);
  EXPECT_EQ(first->gpus[0].sm_count, 64u);
  EXPECT_EQ(first->gpus[0].reserved_bytes, 30 * kGiB);
  EXPECT_EQ(first->id.rfind("rlease-", 0), 0u);
  ASSERT_TRUE(ledger_.AllocateRemote(Share(56, 30)).ok());  // 120 of 132 SMs, 60 of 80 GiB
  auto no_sms = ledger_.AllocateRemote(Share(16, 1));
  ASSERT_FALSE(no_sms.ok());
  EXPECT_EQ(no_sms.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(no_sms.status().message().find("a: 1 without room for 16 SMs"), std::string::npos)
      << no_sms.status().message();
  ASSERT_TRUE(ledger_.AllocateRemote(Share(4, 20)).ok());  // 8 SMs (4 rounded up): 128, 80 GiB
  EXPECT_FALSE(ledger_.AllocateRemote(Share(1, 1)).ok());
  // Neither an exclusive nor a shared allocation takes a GPU carved up by remote leases.
  AllocationRequest exclusive;
  auto r = ledger_.Allocate(exclusive);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 leased"), std::string::npos) << r.status().message();
  ASSERT_TRUE(ledger_.Release(first->id).ok());
  auto memory = ledger_.AllocateRemote(Share(8, 40));  // 64 SMs back, but only 30 GiB free
  ASSERT_FALSE(memory.ok());
  EXPECT_NE(memory.status().message().find("a: 1 without 40960 MiB free"), std::string::npos)
      << memory.status().message();
  EXPECT_TRUE(ledger_.AllocateRemote(Share(8, 30)).ok());
}

TEST_F(LedgerTest, AGpuWithoutMpsTakesOneRemoteLeaseAndNoneBesideAnExclusiveOne) {
  auto gpus = RemoteGpus(2, /*shared=*/false);
  ledger_.UpdateNode("a", gpus);
  ASSERT_TRUE(ledger_.AllocateRemote(Share(8, 1)).ok());
  ASSERT_TRUE(ledger_.AllocateRemote(Share(8, 1)).ok());  // the other GPU
  auto third = ledger_.AllocateRemote(Share(8, 1));
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("a: 2 not shared and in use"), std::string::npos)
      << third.status().message();
  // An exclusive lease on a GPU keeps remote leases off it, whatever room it has.
  ledger_.UpdateNode("b", RemoteGpus(1, /*shared=*/true));
  AllocationRequest exclusive;
  exclusive.gpu_model = "H100";
  ledger_.UpdateNode("b", RemoteGpus(1, true));
  auto held = ledger_.Allocate(exclusive);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->gpus[0].node, "b");
  auto r = ledger_.AllocateRemote(Share(8, 1, "b"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("b: 1 leased exclusively"), std::string::npos)
      << r.status().message();
}

TEST_F(LedgerTest, RemoteLeasesGoOnlyWhereGpuServersRunAndPack) {
  auto plain = Gpus(2);  // a node without GPU servers
  ledger_.UpdateNode("plain", plain);
  auto unknown = RemoteGpus(1, true);
  unknown[0].sm_count.reset();
  ledger_.UpdateNode("unprobed", unknown);
  ledger_.UpdateNode("x", RemoteGpus(2, true));
  ledger_.UpdateNode("y", RemoteGpus(2, true));
  // Binpack: the second share goes on the GPU the first one uses, not on an idle one.
  auto first = ledger_.AllocateRemote(Share(32, 10));
  ASSERT_TRUE(first.ok());
  auto second = ledger_.AllocateRemote(Share(32, 10));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->gpus[0].node, first->gpus[0].node);
  EXPECT_EQ(second->gpus[0].uuid, first->gpus[0].uuid);
  // A pinned node.
  auto pinned = ledger_.AllocateRemote(Share(32, 10, "y"));
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->gpus[0].node, "y");
  // The reasons per node; and what can never fit.
  for (int i = 0; i < 2; ++i) {  // the two idle GPUs left
    auto big = ledger_.AllocateRemote(Share(132, 79));
    ASSERT_TRUE(big.ok()) << big.status().ToString();
  }
  auto r = ledger_.AllocateRemote(Share(132, 10));
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("plain: 2 not serving remote GPUs"), std::string::npos) << m;
  EXPECT_NE(m.find("unprobed: 1 without SM count"), std::string::npos) << m;
  EXPECT_NE(m.find("without room for 132 SMs"), std::string::npos) << m;
  EXPECT_EQ(ledger_.RemoteNeverFits(Share(132, 10)), "");
  EXPECT_NE(ledger_.RemoteNeverFits(Share(200, 10)).find("132 SMs and 81920 MiB"),
            std::string::npos)
      << ledger_.RemoteNeverFits(Share(200, 10));
  EXPECT_NE(ledger_.RemoteNeverFits(Share(8, 10, "nowhere")), "");
  RemoteRequest a100 = Share(8, 1);
  a100.gpu_model = "A100";
  EXPECT_NE(ledger_.RemoteNeverFits(a100).find("no A100 GPU"), std::string::npos);
  // Requests are checked.
  RemoteRequest both = Share(8, 1);
  both.sm_percent = 10;
  EXPECT_EQ(ledger_.AllocateRemote(both).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger_.AllocateRemote(Share(8, 0)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LedgerTest, RemoteLeasesExpireAndFollowTheUnreachableGrace) {
  ledger_.UpdateNode("a", RemoteGpus(1, true));
  RemoteRequest r = Share(8, 1);
  r.ttl = std::chrono::seconds(30);
  auto lease = ledger_.AllocateRemote(r);
  ASSERT_TRUE(lease.ok());
  clock_.Advance(std::chrono::seconds(31));
  auto gone = ledger_.Expire();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_TRUE(gone[0].remote);
  r.ttl = std::chrono::hours(1);
  ledger_.UpdateNode("a", RemoteGpus(1, true));
  ASSERT_TRUE(ledger_.AllocateRemote(r).ok());
  clock_.Advance(std::chrono::seconds(16));  // unreachable: nothing offered, the lease held
  EXPECT_FALSE(ledger_.AllocateRemote(r).ok());
  EXPECT_TRUE(ledger_.Expire().empty());
  clock_.Advance(std::chrono::seconds(60));  // past the grace
  EXPECT_EQ(ledger_.Expire().size(), 1u);
}

TEST_F(LedgerTest, LeasesExpireUnlessRenewed) {
  ledger_.UpdateNode("a", Gpus(1));
  AllocationRequest req;
  req.ttl = std::chrono::seconds(60);
  auto lease = ledger_.Allocate(req);
  ASSERT_TRUE(lease.ok());
  clock_.Advance(std::chrono::seconds(50));
  ledger_.UpdateNode("a", Gpus(1));
  ASSERT_TRUE(ledger_.Renew(lease->id).ok());  // expires 60 s from now
  clock_.Advance(std::chrono::seconds(50));
  ledger_.UpdateNode("a", Gpus(1));
  EXPECT_FALSE(ledger_.Allocate(req).ok());
  EXPECT_TRUE(ledger_.Expire().empty());
  clock_.Advance(std::chrono::seconds(11));
  ledger_.UpdateNode("a", Gpus(1));
  // Past its expiry the GPU is free at once, even before Expire() reports the lease.
  auto again = ledger_.Allocate(req);
  EXPECT_TRUE(again.ok());
  auto gone = ledger_.Expire();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].id, lease->id);
  EXPECT_FALSE(ledger_.Renew(lease->id).ok());
}

TEST_F(LedgerTest, UnreachableNodesOfferNothingAndLoseTheirLeasesAfterTheGrace) {
  ledger_.UpdateNode("a", Gpus(1));
  ledger_.UpdateNode("b", Gpus(1));
  AllocationRequest req;
  req.ttl = std::chrono::seconds(3600);
  auto on_a = ledger_.Allocate(req);
  ASSERT_TRUE(on_a.ok());
  const std::string node_a = on_a->gpus[0].node;
  const std::string other = node_a == "a" ? "b" : "a";
  clock_.Advance(std::chrono::seconds(16));  // neither has reported for 16 s
  EXPECT_FALSE(ledger_.Reachable(node_a));
  auto none = ledger_.Allocate(req);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(other + ": unreachable"), std::string::npos);
  ledger_.UpdateNode(other, Gpus(1));  // it comes back on its own
  EXPECT_TRUE(ledger_.Allocate(req).ok());
  EXPECT_TRUE(ledger_.Expire().empty());  // node_a's lease is kept during the grace
  clock_.Advance(std::chrono::seconds(60));
  ledger_.UpdateNode(other, Gpus(1));
  auto gone = ledger_.Expire();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].id, on_a->id);
}

TEST_F(LedgerTest, PoliciesChooseNodes) {
  ledger_.UpdateNode("empty", Gpus(8));
  auto busy = Gpus(8);
  ledger_.UpdateNode("busy", busy);
  AllocationRequest six;
  six.gpus = 6;
  ASSERT_TRUE(ledger_.Allocate(six).ok());  // makes one of them busy
  AllocationRequest one;
  one.policy = Policy::kBinpack;
  auto packed = ledger_.Allocate(one);
  ASSERT_TRUE(packed.ok());
  one.policy = Policy::kSpread;
  auto spread = ledger_.Allocate(one);
  ASSERT_TRUE(spread.ok());
  EXPECT_NE(packed->gpus[0].node, spread->gpus[0].node);  // fullest vs emptiest node
  AllocationRequest score;
  score.gpus = 2;
  ledger_.UpdateNode("empty", Gpus(8, 80, 50));
  auto best = ledger_.Allocate(score);
  ASSERT_TRUE(best.ok());
  EXPECT_GE(best->gpus[0].score, best->gpus[1].score);
}

// Random sequences of allocate / renew / release / time / heartbeats (with nodes going silent)
// never give one GPU to two leases when one of them is exclusive, never grant on an unreachable
// node, and never keep a lease on a node silent past the grace once expired.
TEST_F(LedgerTest, RandomSequencesNeverDoubleBook) {
  std::mt19937 rng(2026);
  const std::vector<std::string> nodes = {"n0", "n1", "n2"};
  std::vector<std::string> ids;
  // n0 serves remote GPUs shared (MPS), n1 not shared, n2 not at all.
  auto gpus_of = [&](const std::string& n, uint64_t free_gib, uint32_t util) {
    auto gpus = n == "n2" ? Gpus(4, free_gib, util) : RemoteGpus(4, n == "n0", free_gib);
    for (auto& g : gpus) g.utilization_percent = util;
    return gpus;
  };
  for (const auto& n : nodes) ledger_.UpdateNode(n, gpus_of(n, 80, 0));
  for (int step = 0; step < 20000; ++step) {
    switch (rng() % 8) {
      case 6:
      case 7: {
        RemoteRequest req;
        if (rng() % 2) {
          req.sm_count = 1 + static_cast<uint32_t>(rng() % 140);
        } else {
          req.sm_percent = 1 + static_cast<double>(rng() % 100);
        }
        req.memory_bytes = (1 + rng() % 60) * kGiB;
        req.ttl = std::chrono::seconds(1 + rng() % 120);
        if (rng() % 4 == 0) req.node = nodes[rng() % nodes.size()];
        auto l = ledger_.AllocateRemote(req);
        if (l.ok()) {
          ids.push_back(l->id);
          ASSERT_EQ(l->gpus.size(), 1u);
          ASSERT_TRUE(ledger_.Reachable(l->gpus[0].node));
          ASSERT_NE(l->gpus[0].node, "n2");
          ASSERT_GE(l->gpus[0].sm_count, req.sm_count);
        }
        break;
      }
      case 0:
      case 1: {
        AllocationRequest req;
        req.gpus = 1 + static_cast<int>(rng() % 4);
        req.exclusive = rng() % 3 != 0;
        req.same_node = rng() % 2 == 0;
        req.policy = static_cast<Policy>(rng() % 3);
        req.min_free_memory_bytes = (rng() % 50) * kGiB;
        req.ttl = std::chrono::seconds(1 + rng() % 120);
        auto l = ledger_.Allocate(req);
        if (l.ok()) {
          ids.push_back(l->id);
          ASSERT_EQ(static_cast<int>(l->gpus.size()), req.gpus);
          for (const auto& g : l->gpus) ASSERT_TRUE(ledger_.Reachable(g.node)) << g.node;
        }
        break;
      }
      case 2:
        if (!ids.empty()) (void)ledger_.Renew(ids[rng() % ids.size()]);
        break;
      case 3:
        if (!ids.empty()) (void)ledger_.Release(ids[rng() % ids.size()]);
        break;
      case 4:
        clock_.Advance(std::chrono::seconds(rng() % 20));
        (void)ledger_.Expire();
        break;
      case 5: {
        const std::string& n = nodes[rng() % nodes.size()];
        auto gpus = gpus_of(n, 30 + rng() % 50, rng() % 100);
        if (rng() % 10 == 0) gpus[rng() % 4].lost = true;
        ledger_.UpdateNode(n, gpus);
        break;
      }
    }
    // Invariant: among live leases, a GPU in an exclusive lease is in no other lease.
    const auto now = clock_.WallNow();
    // Remote leases: no GPU's SMs or memory oversubscribed by them, and more than one only on
    // a shared GPU.
    std::map<std::pair<std::string, uint32_t>, std::pair<int, int>> holders;  // exclusive, shared
    struct RemoteHeld {
      int leases = 0;
      uint64_t sms = 0, bytes = 0;
    };
    std::map<std::pair<std::string, uint32_t>, RemoteHeld> remote;
    for (const Lease& l : ledger_.Leases()) {
      if (l.expires_at <= now) continue;
      for (const LeasedGpu& g : l.gpus) {
        auto& h = holders[{g.node, g.index}];
        (l.exclusive ? h.first : h.second)++;
        if (l.remote) {
          RemoteHeld& r = remote[{g.node, g.index}];
          ++r.leases;
          r.sms += g.sm_count;
          r.bytes += g.reserved_bytes;
        }
      }
    }
    for (const auto& [gpu, h] : holders) {
      ASSERT_TRUE(h.first == 0 || (h.first == 1 && h.second == 0))
          << "step " << step << ": " << gpu.first << "/" << gpu.second << " held by " << h.first
          << " exclusive and " << h.second << " shared leases";
    }
    for (const auto& [gpu, r] : remote) {
      ASSERT_LE(r.sms, 132u) << "step " << step << ": " << gpu.first << "/" << gpu.second;
      ASSERT_LE(r.bytes, 80 * kGiB) << "step " << step << ": " << gpu.first << "/" << gpu.second;
      if (gpu.first != "n0") {
        ASSERT_LE(r.leases, 1) << "step " << step << ": " << gpu.first;
      }
    }
  }
}

}  // namespace
}  // namespace flyt::sched

namespace flyt::sched {
namespace {

TEST(LedgerEngineRules, VllmFractionOfEachGpusTotalMustBeFree) {
  FakeClock clock;
  Ledger ledger(clock);
  auto gpus = Gpus(2, 80);
  gpus[0].memory_free_bytes = 70 * kGiB;  // 87.5% free: below vLLM's 90%
  ledger.UpdateNode("a", gpus);
  AllocationRequest req;
  req.gpus = 1;
  req.min_free_fraction = 0.9;
  req.exclusive = false;
  auto lease = ledger.Allocate(req);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->gpus[0].index, 1u);
  EXPECT_EQ(lease->gpus[0].reserved_bytes, static_cast<uint64_t>(0.9 * 80 * kGiB));
  auto again = ledger.Allocate(req);  // GPU 1 now has 8 GiB unreserved
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("2 below min_free_memory_mb"), std::string::npos)
      << again.status().message();
}

TEST(LedgerEngineRules, SglangRanksMustHaveFreeMemoryWithinTheSpread) {
  FakeClock clock;
  Ledger ledger(clock);
  auto gpus = Gpus(3, 80);
  gpus[0].memory_free_bytes = 40 * kGiB;
  gpus[1].memory_free_bytes = 80 * kGiB;
  gpus[2].memory_free_bytes = 76 * kGiB;
  ledger.UpdateNode("a", gpus);
  AllocationRequest req;
  req.gpus = 2;
  req.max_free_spread = 0.10;
  auto lease = ledger.Allocate(req);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::set<uint32_t> got;
  for (const auto& g : lease->gpus) got.insert(g.index);
  EXPECT_EQ(got, (std::set<uint32_t>{1, 2}));
  ASSERT_TRUE(ledger.Release(lease->id).ok());
  gpus[2].memory_free_bytes = 50 * kGiB;
  ledger.UpdateNode("a", gpus);
  auto none = ledger.Allocate(req);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("spread rule"), std::string::npos)
      << none.status().message();
}

TEST(LedgerRestore, RestoredLeasesHoldTheirGpusAndIdsAreUnique) {
  FakeClock clock;
  Ledger ledger(clock);
  ledger.UpdateNode("a", Gpus(1));
  Lease l;
  l.id = "lease-abc";
  l.gpus.push_back({"a", 0, "GPU-H1000", "NVIDIA H100 80GB HBM3", 1.0, 0});
  l.granted_at = clock.WallNow();
  l.ttl = std::chrono::seconds(60);
  l.expires_at = l.granted_at + l.ttl;
  ledger.Restore(l);
  AllocationRequest req;
  EXPECT_FALSE(ledger.Allocate(req).ok());
  ASSERT_TRUE(ledger.Release("lease-abc").ok());
  req.id = "lease-x";
  ASSERT_TRUE(ledger.Allocate(req).ok());
  ledger.UpdateNode("b", Gpus(1));
  auto dup = ledger.Allocate(req);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
}

// ---- usage-profile states (issue 16): avoid_states and prefer_idle ----------------------------

std::vector<GpuState> WithStates(std::vector<GpuState> gpus,
                                 const std::vector<std::string>& states) {
  for (size_t i = 0; i < gpus.size() && i < states.size(); ++i) gpus[i].profile_state = states[i];
  return gpus;
}

TEST_F(LedgerTest, ACyclicGpuIsAvoidedAndTheRefusalCountsIt) {
  ledger_.UpdateNode("a", WithStates(Gpus(3), {"cyclic", "cyclic", "idle"}));
  AllocationRequest req;
  req.avoid_states = {"cyclic"};
  auto got = ledger_.Allocate(req);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->gpus[0].index, 2u);  // the only one not cyclic
  EXPECT_EQ(got->avoid_states, std::vector<std::string>{"cyclic"});
  auto refused = ledger_.Allocate(req);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("a: 0 available, 1 leased, 2 avoided: state cyclic"),
            std::string::npos)
      << refused.status().message();
}

TEST_F(LedgerTest, AGpuWithoutAProfileIsUnknownAndAvoidedOnlyWhenUnknownIsListed) {
  ledger_.UpdateNode("a", Gpus(1));  // no profile: "unknown"
  AllocationRequest req;
  req.avoid_states = {"cyclic", "bursty"};
  ASSERT_TRUE(ledger_.Allocate(req).ok());
  ledger_.UpdateNode("b", Gpus(1, 80, 0, "NVIDIA A100-SXM4-80GB"));
  req.avoid_states = {"unknown"};
  auto refused = ledger_.Allocate(req);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("b: 0 available, 1 avoided: state unknown"),
            std::string::npos)
      << refused.status().message();
}

TEST_F(LedgerTest, PreferIdlePicksTheIdleGpuOverABetterScoredOne) {
  // GPU 0 scores better (more free memory, less utilisation) but carries a steady load; GPU 1 is
  // idle by its profile.
  std::vector<GpuState> gpus = Gpus(2);
  gpus[1].memory_free_bytes = 40 * kGiB;
  gpus[1].utilization_percent = 30;
  ledger_.UpdateNode("a", WithStates(gpus, {"steady", "idle"}));
  AllocationRequest req;
  req.ttl = std::chrono::seconds(60);
  auto idle = ledger_.Allocate(req);
  ASSERT_TRUE(idle.ok());
  EXPECT_EQ(idle->gpus[0].index, 1u);
  EXPECT_TRUE(idle->prefer_idle);
  ASSERT_TRUE(ledger_.Release(idle->id).ok());
  // Without the preference the score decides.
  req.prefer_idle = false;
  auto scored = ledger_.Allocate(req);
  ASSERT_TRUE(scored.ok());
  EXPECT_EQ(scored->gpus[0].index, 0u);
}

TEST_F(LedgerTest, PreferIdleDoesNotPreferAnIdleGpuWhoseMemoryAProcessStillHolds) {
  // GPU 1 reads idle, but a process (a notebook, for less than allocated_idle_after) holds its
  // memory: that is not what prefer_idle means, so the score decides (GPU 0 has more free).
  std::vector<GpuState> gpus = Gpus(2);
  gpus[1].memory_free_bytes = 30 * kGiB;
  gpus[1].holds_processes = true;
  ledger_.UpdateNode("a", WithStates(gpus, {"steady", "idle"}));
  AllocationRequest req;
  auto got = ledger_.Allocate(req);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->gpus[0].index, 0u);
  ASSERT_TRUE(ledger_.Release(got->id).ok());
  // Without the process it is preferred.
  gpus[1].holds_processes = false;
  ledger_.UpdateNode("a", WithStates(gpus, {"steady", "idle"}));
  got = ledger_.Allocate(req);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->gpus[0].index, 1u);
}

TEST_F(LedgerTest, PreferIdleOrdersNodesBeforeThePolicy) {
  // Binpack would fill node "a" (fewest available); "b"'s GPU is idle.
  ledger_.UpdateNode("a", WithStates(Gpus(1), {"bursty"}));
  ledger_.UpdateNode("b", WithStates(Gpus(4), {"idle", "idle", "idle", "idle"}));
  AllocationRequest req;
  req.policy = Policy::kBinpack;
  auto got = ledger_.Allocate(req);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->gpus[0].node, "b");
  ASSERT_TRUE(ledger_.Release(got->id).ok());
  req.prefer_idle = false;
  got = ledger_.Allocate(req);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->gpus[0].node, "a");
}

TEST_F(LedgerTest, RemoteLeasesAvoidStatesAndPreferIdle) {
  ledger_.UpdateNode("a", WithStates(RemoteGpus(3, /*shared=*/true), {"cyclic", "steady", "idle"}));
  RemoteRequest r = Share(8, 1);
  r.avoid_states = {"cyclic"};
  auto got = ledger_.AllocateRemote(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->gpus[0].index, 2u);  // idle first, though binpack alone would take any
  r.avoid_states = {"cyclic", "steady", "idle"};
  auto refused = ledger_.AllocateRemote(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "1 avoided: state cyclic, 1 avoided: state idle, 1 avoided: state steady"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace flyt::sched
