// The behaviour every Store backend must show, written once and run against each: store_test.cc
// instantiates it on SQLite files, store_postgres_test.cc on a throw-away PostgreSQL server. Each
// test gets a new, empty database from the backend's TestDatabase and opens one or more Stores on
// it (several Stores on one database stand for several managers).
//
// Test-only; a TestDatabase is used from the test's threads one call at a time.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"

namespace flyt::store::test {

class TestDatabase {
 public:
  virtual ~TestDatabase() = default;
  // A URL to a new, empty database; each call gives another one.
  virtual std::string NewUrl() = 0;
  // Runs SQL on the database behind the Store's back (to age or damage it); "" or the error.
  virtual std::string ExecRaw(const std::string& url, const std::string& sql) = 0;
  // Called from each test's SetUp: records a failure, or a skip, when the database cannot be had
  // (the PostgreSQL server could not be started).
  virtual void CheckUsable() {}
};

struct Backend {
  const char* name;
  TestDatabase* (*database)();  // the process's test database, set up by the test's Environment
};

inline void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param.name;
}

#define FLYT_ASSERT_OK(expr)                                                 \
  do {                                                                       \
    const ::flyt::Status flyt_assert_status_ = (expr);                       \
    ASSERT_TRUE(flyt_assert_status_.ok()) << flyt_assert_status_.ToString(); \
  } while (0)

class StoreContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_ = GetParam().database();
    ASSERT_NE(database_, nullptr);
    database_->CheckUsable();
    if (IsSkipped() || HasFailure()) return;
    url_ = database_->NewUrl();
    ASSERT_FALSE(url_.empty());
  }

  // A Store on this test's database; null (and a failure) when it cannot be opened.
  std::unique_ptr<Store> OpenStore() {
    auto store = Store::Open(url_);
    if (!store.ok()) {
      ADD_FAILURE() << "Open(" << url_ << "): " << store.status().ToString();
      return nullptr;
    }
    return std::move(store).value();
  }

  static Status PutOne(Store& store, Table table, const std::string& id, const std::string& body) {
    return store.Update(Durability::kDurable, [&](Txn& txn) { return txn.Put(table, id, body); });
  }

  static std::optional<std::string> GetOne(Store& store, Table table, const std::string& id) {
    std::optional<std::string> body;
    Status status = store.Update(Durability::kRelaxed, [&](Txn& txn) -> Status {
      auto got = txn.Get(table, id);
      if (!got.ok()) return got.status();
      body = *got;
      return Status::Ok();
    });
    EXPECT_TRUE(status.ok()) << status.ToString();
    return body;
  }

  static int64_t RevisionOf(Store& store) {
    auto revision = store.Revision();
    EXPECT_TRUE(revision.ok()) << revision.status().ToString();
    return revision.ok() ? *revision : -1;
  }

  static Status Claim(Store& store, const std::string& lease, std::vector<std::string> gpus,
                      bool exclusive) {
    return store.Update(Durability::kDurable,
                        [&](Txn& txn) { return txn.ClaimGpus(lease, gpus, exclusive); });
  }

  TestDatabase* database_ = nullptr;
  std::string url_;
};

TEST_P(StoreContractTest, OpenAppliesEveryMigrationOnceAndStartsAtRevisionZero) {
  auto first = OpenStore();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->SchemaVersion(), LatestSchemaVersion());
  EXPECT_EQ(RevisionOf(*first), 0);
  FLYT_ASSERT_OK(PutOne(*first, Table::kNodes, "n1", R"({"a":1})"));
  first.reset();

  auto again = OpenStore();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->SchemaVersion(), LatestSchemaVersion());
  EXPECT_EQ(GetOne(*again, Table::kNodes, "n1"), R"({"a":1})");
  EXPECT_EQ(RevisionOf(*again), 1);
}

// A store records when it was created; opening one "that must exist" never creates it.
TEST_P(StoreContractTest, ANewStoreRecordsItsCreationAndOnlyOpenForCreationMakesOne) {
  auto refused = Store::Open(url_, OpenMode::kExisting);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().reason() == kStoreMissingReason ||
              refused.status().reason() == kStoreUninitializedReason)
      << refused.status().ToString();
  // Nothing was created by the refusal: a second look sees the same.
  refused = Store::Open(url_, OpenMode::kExisting);
  ASSERT_FALSE(refused.ok());

  const int64_t before_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  auto created = OpenStore();
  ASSERT_NE(created, nullptr);
  const int64_t created_ms = created->CreatedMs();
  EXPECT_GE(created_ms, before_ms - 1000);
  EXPECT_LE(created_ms, before_ms + 60000);
  FLYT_ASSERT_OK(created->Check());
  created.reset();

  auto existing = Store::Open(url_, OpenMode::kExisting);
  ASSERT_TRUE(existing.ok()) << existing.status().ToString();
  EXPECT_EQ((*existing)->CreatedMs(), created_ms);
  FLYT_ASSERT_OK((*existing)->Check());
}

// Another program's database (tables, but not flyt's) is not taken over when it must exist.
TEST_P(StoreContractTest, ADatabaseWithoutFlytsSchemaIsRefusedWhenItMustExist) {
  ASSERT_EQ(database_->ExecRaw(url_, "CREATE TABLE other (x INTEGER)"), "");
  auto refused = Store::Open(url_, OpenMode::kExisting);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), kStoreUninitializedReason) << refused.status().ToString();
  EXPECT_NE(database_->ExecRaw(url_, "SELECT * FROM schema_migrations"), "")
      << "the refusal created flyt's tables";
}

TEST_P(StoreContractTest, PutGetDeleteLeaveTombstones) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const std::string body(4096, 'x');
  FLYT_ASSERT_OK(PutOne(*store, Table::kLeases, "l1", body));
  EXPECT_EQ(GetOne(*store, Table::kLeases, "l1"), body);
  EXPECT_EQ(GetOne(*store, Table::kJobs, "l1"), std::nullopt) << "tables are separate";

  FLYT_ASSERT_OK(store->Update(Durability::kDurable,
                               [](Txn& txn) { return txn.Delete(Table::kLeases, "l1"); }));
  EXPECT_EQ(GetOne(*store, Table::kLeases, "l1"), std::nullopt);
  auto rows = store->List(Table::kLeases);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].id, "l1");
  EXPECT_TRUE((*rows)[0].deleted);
  EXPECT_EQ((*rows)[0].body, "");
  EXPECT_EQ((*rows)[0].seq, 2);

  // Deleting a tombstone or a row that never was: NotFound, and nothing changes.
  for (const char* id : {"l1", "never"}) {
    Status deleted = store->Update(Durability::kDurable,
                                   [&](Txn& txn) { return txn.Delete(Table::kLeases, id); });
    EXPECT_EQ(deleted.code(), StatusCode::kNotFound) << deleted.ToString();
    EXPECT_NE(deleted.message().find(std::string("leases/") + id), std::string::npos)
        << deleted.message();
  }
  EXPECT_EQ(RevisionOf(*store), 2);

  // A Put over the tombstone revives the row.
  FLYT_ASSERT_OK(PutOne(*store, Table::kLeases, "l1", "{}"));
  EXPECT_EQ(GetOne(*store, Table::kLeases, "l1"), "{}");
  rows = store->List(Table::kLeases);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_FALSE((*rows)[0].deleted);
  EXPECT_EQ((*rows)[0].seq, 3);
}

TEST_P(StoreContractTest, OnlyUpdatesThatWriteRowsBumpTheRevision) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  int64_t seen_revision = -1;
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [&](Txn& txn) {
    seen_revision = txn.Revision();
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, "n1", "{}"));
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kClients, "c1", "{}"));
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, "n2", "{}"));
    return txn.Put(Table::kNodes, "n1", R"({"v":2})");
  }));
  EXPECT_EQ(seen_revision, 0);
  EXPECT_EQ(RevisionOf(*store), 1);
  auto nodes = store->List(Table::kNodes);
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  for (const Row& row : *nodes) EXPECT_EQ(row.seq, 1) << row.id;

  // Reads, claims and events alone do not bump it.
  FLYT_ASSERT_OK(store->Update(Durability::kRelaxed, [&](Txn& txn) -> Status {
    seen_revision = txn.Revision();
    auto got = txn.Get(Table::kNodes, "n1");
    if (!got.ok()) return got.status();
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus("l1", {"n1/GPU-0"}, true));
    return txn.AppendEvent(1000, "lease.granted", "{}");
  }));
  EXPECT_EQ(seen_revision, 1);
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [](Txn&) { return Status::Ok(); }));
  EXPECT_EQ(RevisionOf(*store), 1);

  FLYT_ASSERT_OK(store->Update(Durability::kRelaxed, [&](Txn& txn) {
    seen_revision = txn.Revision();
    return txn.Put(Table::kJobs, "j1", "{}");
  }));
  EXPECT_EQ(seen_revision, 1);
  EXPECT_EQ(RevisionOf(*store), 2);
  auto jobs = store->List(Table::kJobs);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].seq, 2);
}

TEST_P(StoreContractTest, AFailedCallbackWritesNothing) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(PutOne(*store, Table::kNodes, "keep", "{}"));
  Status status = store->Update(Durability::kDurable, [](Txn& txn) -> Status {
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, "n1", "{}"));
    FLYT_RETURN_IF_ERROR(txn.Delete(Table::kNodes, "keep"));
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus("l1", {"n1/GPU-0"}, true));
    FLYT_RETURN_IF_ERROR(txn.AppendEvent(5, "lease.granted", "{}"));
    return Status(StatusCode::kResourceExhausted, "no room after all");
  });
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "no room after all");
  EXPECT_EQ(GetOne(*store, Table::kNodes, "n1"), std::nullopt);
  EXPECT_EQ(GetOne(*store, Table::kNodes, "keep"), "{}");
  EXPECT_EQ(RevisionOf(*store), 1);
  auto events = store->Events(0, 10);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(events->empty());
  EXPECT_TRUE(Claim(*store, "l2", {"n1/GPU-0"}, true).ok()) << "the claim was rolled back";
}

TEST_P(StoreContractTest, AnExceptionFromTheCallbackRollsBackAndTheStoreStaysUsable) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_THROW((void)store->Update(Durability::kDurable,
                                   [](Txn& txn) -> Status {
                                     (void)txn.Put(Table::kNodes, "n1", "{}");
                                     throw std::runtime_error("bad json");
                                   }),
               std::runtime_error);
  EXPECT_EQ(GetOne(*store, Table::kNodes, "n1"), std::nullopt);
  FLYT_ASSERT_OK(PutOne(*store, Table::kNodes, "n2", "{}"));
  EXPECT_EQ(RevisionOf(*store), 1);
}

TEST_P(StoreContractTest, TwoStoresOnOneDatabaseShareAChangeFeed) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  FLYT_ASSERT_OK(a->Update(Durability::kDurable, [](Txn& txn) {
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, "y", "Y1"));
    return txn.Put(Table::kNodes, "x", "X1");
  }));
  auto seen = b->List(Table::kNodes, 0);
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  ASSERT_EQ(seen->size(), 2u);
  EXPECT_EQ((*seen)[0].id, "x");
  EXPECT_EQ((*seen)[0].body, "X1");
  EXPECT_EQ((*seen)[1].id, "y");
  const int64_t caught_up = b->Revision().value();
  EXPECT_EQ(caught_up, 1);

  // b writes on top of a's revision; a catches up with only what changed.
  FLYT_ASSERT_OK(b->Update(Durability::kRelaxed, [](Txn& txn) {
    EXPECT_EQ(txn.Revision(), 1);
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, "z", "Z2"));
    return txn.Delete(Table::kNodes, "x");
  }));
  FLYT_ASSERT_OK(a->Update(Durability::kDurable, [](Txn& txn) {
    EXPECT_EQ(txn.Revision(), 2);
    return txn.Put(Table::kNodes, "y", "Y3");
  }));
  auto changes = a->List(Table::kNodes, caught_up);
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->size(), 3u);
  EXPECT_EQ((*changes)[0].id, "x");
  EXPECT_TRUE((*changes)[0].deleted);
  EXPECT_EQ((*changes)[0].seq, 2);
  EXPECT_EQ((*changes)[1].id, "z");
  EXPECT_EQ((*changes)[1].seq, 2);
  EXPECT_EQ((*changes)[2].id, "y");
  EXPECT_EQ((*changes)[2].body, "Y3");
  EXPECT_EQ((*changes)[2].seq, 3);
  EXPECT_EQ(RevisionOf(*b), 3);

  // The same feed inside a transaction.
  FLYT_ASSERT_OK(b->Update(Durability::kRelaxed, [](Txn& txn) -> Status {
    auto rows = txn.ListSince(Table::kNodes, 2);
    if (!rows.ok()) return rows.status();
    EXPECT_EQ(rows->size(), 1u);
    if (!rows->empty()) {
      EXPECT_EQ(rows->front().id, "y");
    }
    return Status::Ok();
  }));
}

TEST_P(StoreContractTest, AnExclusiveClaimCollisionRollsBackTheWholeUpdate) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(Claim(*store, "lease-1", {"n1/GPU-1"}, true));
  Status status = store->Update(Durability::kDurable, [](Txn& txn) -> Status {
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, "lease-2", "{}"));
    FLYT_RETURN_IF_ERROR(txn.AppendEvent(1, "lease.granted", "{}"));
    return txn.ClaimGpus("lease-2", {"n1/GPU-0", "n1/GPU-1"}, true);
  });
  EXPECT_EQ(status.code(), StatusCode::kAlreadyExists) << status.ToString();
  EXPECT_NE(status.message().find("n1/GPU-1"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("lease-1"), std::string::npos) << status.message();
  EXPECT_EQ(GetOne(*store, Table::kLeases, "lease-2"), std::nullopt);
  EXPECT_EQ(RevisionOf(*store), 0);
  EXPECT_TRUE(store->Events(0, 10)->empty());
  // GPU-0 was not kept for lease-2.
  FLYT_ASSERT_OK(Claim(*store, "lease-3", {"n1/GPU-0"}, true));
  // A lease claiming its own GPU again is no collision.
  FLYT_ASSERT_OK(Claim(*store, "lease-1", {"n1/GPU-1"}, true));
}

TEST_P(StoreContractTest, ARefusedClaimLeavesNothingBehindAndTheTransactionUsable) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(Claim(*store, "lease-1", {"n1/GPU-1"}, true));
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [](Txn& txn) -> Status {
    Status refused = txn.ClaimGpus("lease-2", {"n1/GPU-0", "n1/GPU-1"}, true);
    EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists);
    // The scheduler falls back to another GPU in the same transaction.
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus("lease-2", {"n1/GPU-2"}, true));
    return txn.Put(Table::kLeases, "lease-2", R"({"gpus":["n1/GPU-2"]})");
  }));
  EXPECT_EQ(GetOne(*store, Table::kLeases, "lease-2"), R"({"gpus":["n1/GPU-2"]})");
  FLYT_ASSERT_OK(Claim(*store, "lease-3", {"n1/GPU-0"}, true));  // all-or-nothing: GPU-0 free
  EXPECT_EQ(Claim(*store, "lease-3", {"n1/GPU-2"}, true).code(), StatusCode::kAlreadyExists);
}

TEST_P(StoreContractTest, SharedClaimsCoexistAndReleaseFreesExclusiveOnes) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(Claim(*store, "share-1", {"n1/GPU-0", "n1/GPU-1"}, false));
  FLYT_ASSERT_OK(Claim(*store, "share-2", {"n1/GPU-0"}, false));
  FLYT_ASSERT_OK(Claim(*store, "excl-1", {"n2/GPU-0", "n2/GPU-1"}, true));
  EXPECT_EQ(Claim(*store, "excl-2", {"n2/GPU-1"}, true).code(), StatusCode::kAlreadyExists);

  FLYT_ASSERT_OK(
      store->Update(Durability::kDurable, [](Txn& txn) { return txn.ReleaseGpus("excl-1"); }));
  FLYT_ASSERT_OK(Claim(*store, "excl-2", {"n2/GPU-0", "n2/GPU-1"}, true));
  // Releasing a lease that holds nothing is fine; an empty claim is a no-op.
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [](Txn& txn) {
    FLYT_RETURN_IF_ERROR(txn.ReleaseGpus("never-claimed"));
    return txn.ClaimGpus("nothing", {}, true);
  }));
}

TEST_P(StoreContractTest, EventsAreListedInOrderAndPrunedKeepingTheNewest) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(store->Update(Durability::kRelaxed, [](Txn& txn) {
    for (int i = 1; i <= 5; ++i) {
      FLYT_RETURN_IF_ERROR(txn.AppendEvent(i * 100, "kind." + std::to_string(i),
                                           R"({"i":)" + std::to_string(i) + "}"));
    }
    return Status::Ok();
  }));
  EXPECT_EQ(RevisionOf(*store), 0);
  auto all = store->Events(0, 100);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 5u);
  for (size_t i = 0; i < all->size(); ++i) {
    EXPECT_EQ((*all)[i].at_ms, static_cast<int64_t>(i + 1) * 100);
    EXPECT_EQ((*all)[i].kind, "kind." + std::to_string(i + 1));
    if (i > 0) {
      EXPECT_GT((*all)[i].id, (*all)[i - 1].id);
    }
  }
  EXPECT_EQ((*all)[0].body, R"({"i":1})");

  auto page = store->Events((*all)[1].id, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].id, (*all)[2].id);
  EXPECT_EQ((*page)[1].id, (*all)[3].id);
  EXPECT_TRUE(store->Events(0, 0)->empty());
  auto latest = store->LatestEvents(2);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_EQ(latest->size(), 2u);  // the newest two, oldest first
  EXPECT_EQ((*latest)[0].kind, "kind.4");
  EXPECT_EQ((*latest)[1].kind, "kind.5");
  EXPECT_EQ(store->LatestEvents(100)->size(), 5u);

  auto at_ms_left = [&] {
    std::vector<int64_t> out;
    auto events = store->Events(0, 100);
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    if (events.ok()) {
      for (const EventRow& e : *events) out.push_back(e.at_ms);
    }
    return out;
  };
  FLYT_ASSERT_OK(store->PruneEvents(350, 1));  // 100, 200, 300 are old
  EXPECT_EQ(at_ms_left(), (std::vector<int64_t>{400, 500}));
  FLYT_ASSERT_OK(store->PruneEvents(10000, 1));  // all are old; the newest stays
  EXPECT_EQ(at_ms_left(), (std::vector<int64_t>{500}));
  FLYT_ASSERT_OK(store->PruneEvents(10000, 0));
  EXPECT_TRUE(at_ms_left().empty());
  // Ids keep growing after a prune.
  FLYT_ASSERT_OK(store->Update(Durability::kRelaxed,
                               [](Txn& txn) { return txn.AppendEvent(600, "k", "{}"); }));
  auto after = store->Events(0, 10);
  ASSERT_EQ(after->size(), 1u);
  EXPECT_GT((*after)[0].id, (*all)[4].id);
}

TEST_P(StoreContractTest, ADatabaseFromANewerFlytIsRefusedAndLeftAlone) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    FLYT_ASSERT_OK(PutOne(*store, Table::kNodes, "n1", "{}"));
  }
  const std::string newer = std::to_string(LatestSchemaVersion() + 1);
  ASSERT_EQ(
      database_->ExecRaw(url_, "INSERT INTO schema_migrations (version) VALUES (" + newer + ")"),
      "");
  auto refused = Store::Open(url_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "schema version " + newer + " is newer than this flyt knows (" +
                std::to_string(LatestSchemaVersion()) + "); upgrade flyt"),
            std::string::npos)
      << refused.status().message();

  ASSERT_EQ(database_->ExecRaw(url_, "DELETE FROM schema_migrations WHERE version = " + newer), "");
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(GetOne(*store, Table::kNodes, "n1"), "{}");
}

TEST_P(StoreContractTest, AFailedStatementMeansTheTransactionDoesNotCommit) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  // Break one table behind the store's back: statements on it now fail in the database.
  ASSERT_EQ(database_->ExecRaw(url_, "DROP TABLE jobs"), "");
  Status status = store->Update(Durability::kDurable, [](Txn& txn) -> Status {
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, "n1", "{}"));
    Status failed = txn.Put(Table::kJobs, "j1", "{}");
    EXPECT_FALSE(failed.ok());
    EXPECT_NE(failed.message().find("jobs/j1"), std::string::npos) << failed.message();
    // Ignoring the failure does not make the rest commit.
    (void)txn.Put(Table::kNodes, "n2", "{}");
    return Status::Ok();
  });
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("not committed"), std::string::npos) << status.message();
  EXPECT_EQ(GetOne(*store, Table::kNodes, "n1"), std::nullopt);
  EXPECT_EQ(RevisionOf(*store), 0);
  FLYT_ASSERT_OK(PutOne(*store, Table::kNodes, "n3", "{}"));
}

TEST_P(StoreContractTest, BadInputIsAnErrorThatDoesNotSpoilTheTransaction) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [](Txn& txn) {
    EXPECT_EQ(txn.Put(Table::kNodes, "", "{}").code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(txn.Put(Table::kNodes, "n1", std::string("{\0}", 3)).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(txn.Put(static_cast<Table>(9), "n1", "{}").code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(txn.ClaimGpus("l1", {""}, true).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(txn.AppendEvent(0, "", "{}").code(), StatusCode::kInvalidArgument);
    return txn.Put(Table::kNodes, "n1", "{}");
  }));
  EXPECT_EQ(GetOne(*store, Table::kNodes, "n1"), "{}");
  EXPECT_EQ(store->List(static_cast<Table>(-1)).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, CallingTheStoreFromInsideUpdateIsRefusedNotADeadlock) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Status inner;
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [&](Txn&) {
    inner = store->Update(Durability::kDurable, [](Txn&) { return Status::Ok(); });
    EXPECT_EQ(store->Revision().status().code(), StatusCode::kFailedPrecondition);
    return Status::Ok();
  }));
  EXPECT_EQ(inner.code(), StatusCode::kFailedPrecondition);
  FLYT_ASSERT_OK(PutOne(*store, Table::kNodes, "n1", "{}"));
}

TEST_P(StoreContractTest, ManagersStartingTogetherMigrateOnce) {
  constexpr int kManagers = 4;
  std::vector<std::thread> threads;
  std::vector<Status> results(kManagers);
  std::vector<int> versions(kManagers, -1);
  for (int i = 0; i < kManagers; ++i) {
    threads.emplace_back([&, i] {
      auto store = Store::Open(url_);
      results[i] = store.status();
      if (store.ok()) {
        versions[i] = (*store)->SchemaVersion();
        results[i] = PutOne(**store, Table::kNodes, "n" + std::to_string(i), "{}");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kManagers; ++i) {
    EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
    EXPECT_EQ(versions[i], LatestSchemaVersion());
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(RevisionOf(*store), kManagers);
}

// Retention: finished jobs past the age, and past the newest `keep`, become tombstones (so other
// replicas drop them too), oldest first and at most max_jobs per call; queued and running jobs
// never do; old tombstones go for good.
TEST_P(StoreContractTest, FinishedJobsArePrunedByAgeAndCountOldestFirst) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto other = OpenStore();  // another replica, following the change feed
  ASSERT_NE(other, nullptr);
  // f1..f6 finished at 100..600 ms; r1 and q1 still running or queued.
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [](Txn& txn) -> Status {
    for (int i = 6; i >= 1; --i) {
      FLYT_RETURN_IF_ERROR(txn.PutJob("f" + std::to_string(i), R"({"done":true})", i * 100));
    }
    FLYT_RETURN_IF_ERROR(txn.PutJob("r1", R"({"done":false})", std::nullopt));
    return txn.Put(Table::kJobs, "q1", R"({"done":false})");
  }));
  const int64_t before = RevisionOf(*store);
  auto prune = [&](const JobRetention& retention) {
    std::vector<std::string> ids;
    Status status = store->Update(Durability::kDurable, [&](Txn& txn) -> Status {
      FLYT_ASSIGN_OR_RETURN(ids, txn.PruneFinishedJobs(retention));
      return Status::Ok();
    });
    EXPECT_TRUE(status.ok()) << status.ToString();
    return ids;
  };
  auto live = [&](Store& s) {
    std::set<std::string> ids;
    auto rows = s.List(Table::kJobs);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    if (rows.ok()) {
      for (const Row& row : *rows) {
        if (!row.deleted) ids.insert(row.id);
      }
    }
    return ids;
  };

  // Nothing is old and all fit: nothing goes, and the revision stays.
  EXPECT_TRUE(prune({.finished_before_ms = 50, .keep = 10}).empty());
  EXPECT_EQ(RevisionOf(*store), before);

  // By age: finished before 250 ms.
  EXPECT_EQ(prune({.finished_before_ms = 250, .keep = 10}),
            (std::vector<std::string>{"f1", "f2"}));
  EXPECT_EQ(RevisionOf(*store), before + 1);
  EXPECT_EQ(live(*store), (std::set<std::string>{"f3", "f4", "f5", "f6", "q1", "r1"}));

  // By count, at most one per call: the oldest beyond the newest two go, one at a time.
  EXPECT_EQ(prune({.finished_before_ms = 0, .keep = 2, .max_jobs = 1}),
            std::vector<std::string>{"f3"});
  EXPECT_EQ(prune({.finished_before_ms = 0, .keep = 2, .max_jobs = 10}),
            std::vector<std::string>{"f4"});
  EXPECT_EQ(live(*store), (std::set<std::string>{"f5", "f6", "q1", "r1"}));
  EXPECT_TRUE(prune({.finished_before_ms = 0, .keep = 2}).empty());

  // The other replica learns of each through the change feed: tombstones.
  auto feed = other->List(Table::kJobs, before);
  ASSERT_TRUE(feed.ok()) << feed.status().ToString();
  std::set<std::string> tombstones;
  for (const Row& row : *feed) {
    EXPECT_TRUE(row.deleted) << row.id;
    tombstones.insert(row.id);
  }
  EXPECT_EQ(tombstones, (std::set<std::string>{"f1", "f2", "f3", "f4"}));
  EXPECT_EQ(live(*other), live(*store));

  // keep = 0 takes every finished job; old tombstones are dropped for good.
  EXPECT_EQ(prune({.finished_before_ms = 0, .keep = 0, .purge_tombstones_before_ms = 350}),
            (std::vector<std::string>{"f5", "f6"}));
  auto rows = store->List(Table::kJobs);
  ASSERT_TRUE(rows.ok());
  std::set<std::string> all;
  for (const Row& row : *rows) all.insert(row.id);
  EXPECT_EQ(all, (std::set<std::string>{"f4", "f5", "f6", "q1", "r1"}));
  EXPECT_EQ(live(*store), (std::set<std::string>{"q1", "r1"}));

  // A job that finishes later is found by the time its last put gave.
  FLYT_ASSERT_OK(store->Update(Durability::kDurable,
                               [](Txn& txn) { return txn.PutJob("r1", "{}", 700); }));
  EXPECT_EQ(prune({.finished_before_ms = 800, .keep = 10}), std::vector<std::string>{"r1"});
  EXPECT_EQ(live(*store), (std::set<std::string>{"q1"}));
}

// A database written before version 2 gets each finished job's time from its body.
TEST_P(StoreContractTest, TheRetentionMigrationFindsJobsThatFinishedBefore) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    FLYT_ASSERT_OK(store->Update(Durability::kDurable, [](Txn& txn) -> Status {
      FLYT_RETURN_IF_ERROR(txn.Put(Table::kJobs, "old", R"({"id":"old","finished_at_ms":100})"));
      FLYT_RETURN_IF_ERROR(
          txn.Put(Table::kJobs, "running", R"({"id":"running","finished_at_ms":null})"));
      return txn.Put(Table::kJobs, "queued", R"({"id":"queued"})");
    }));
  }
  // Back to version 1, as an older flyt left it (version 3's tables and column go first).
  ASSERT_EQ(database_->ExecRaw(url_,
                               "DROP TABLE tasks; DROP TABLE idempotency_keys;"
                               " ALTER TABLE events DROP COLUMN bytes;"
                               " DROP INDEX jobs_finished; ALTER TABLE jobs DROP COLUMN finished_ms;"
                               " DELETE FROM meta WHERE key = 'probe';"
                               " DELETE FROM schema_migrations WHERE version >= 2"),
            "");
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->SchemaVersion(), LatestSchemaVersion());
  std::vector<std::string> pruned;
  FLYT_ASSERT_OK(store->Update(Durability::kDurable, [&](Txn& txn) -> Status {
    FLYT_ASSIGN_OR_RETURN(pruned, txn.PruneFinishedJobs({.finished_before_ms = 1000, .keep = 0}));
    return Status::Ok();
  }));
  EXPECT_EQ(pruned, std::vector<std::string>{"old"});
  FLYT_ASSERT_OK(store->Probe());
}

TEST_P(StoreContractTest, AProbeWritesButLeavesTheRevisionAlone) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  FLYT_ASSERT_OK(PutOne(*store, Table::kNodes, "n1", "{}"));
  FLYT_ASSERT_OK(store->Probe());
  FLYT_ASSERT_OK(store->Probe());
  EXPECT_EQ(RevisionOf(*store), 1);
  auto rows = store->List(Table::kNodes);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 1u);
}

// Two managers, several threads each, all granting GPUs from one pool with the usual
// read-check-claim-write transaction. The write lock must serialise them: every grant gets its
// own GPU, no grant collides in the database, and the pool ends exactly used up.
TEST_P(StoreContractTest, ConcurrentManagersNeverGrantOneGpuTwice) {
  constexpr int kThreadsPerStore = 4;
  constexpr int kGpus = 48;
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<std::string> pool;
  for (int i = 0; i < kGpus; ++i)
    pool.push_back("node-" + std::to_string(i % 3) + "/GPU-" + std::to_string(i));

  std::mutex mu;
  std::vector<std::string> granted;  // one entry per successful Update
  std::vector<std::string> unexpected_errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kThreadsPerStore; ++t) {
    Store* store = t % 2 == 0 ? a.get() : b.get();
    threads.emplace_back([&, store, t] {
      for (int n = 0;; ++n) {
        const std::string lease = "lease-" + std::to_string(t) + "-" + std::to_string(n);
        std::string chosen;
        Status status = store->Update(
            n % 2 == 0 ? Durability::kRelaxed : Durability::kDurable, [&](Txn& txn) -> Status {
              auto leases = txn.ListSince(Table::kLeases, 0);
              if (!leases.ok()) return leases.status();
              std::set<std::string> taken;
              for (const Row& row : *leases) {
                if (!row.deleted) taken.insert(row.body);
              }
              // Everyone picks the lowest free GPU: the worst case for collisions.
              auto free = std::find_if(pool.begin(), pool.end(),
                                       [&](const std::string& g) { return !taken.count(g); });
              if (free == pool.end()) return Status(StatusCode::kResourceExhausted, "pool empty");
              chosen = *free;
              FLYT_RETURN_IF_ERROR(txn.ClaimGpus(lease, {chosen}, true));
              return txn.Put(Table::kLeases, lease, chosen);
            });
        std::scoped_lock lock(mu);
        if (status.ok()) {
          granted.push_back(chosen);
        } else {
          if (status.code() != StatusCode::kResourceExhausted) {
            unexpected_errors.push_back(status.ToString());
          }
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();

  for (const std::string& error : unexpected_errors) ADD_FAILURE() << error;
  std::set<std::string> distinct(granted.begin(), granted.end());
  EXPECT_EQ(distinct.size(), granted.size()) << "a GPU was granted twice";
  EXPECT_EQ(granted.size(), pool.size());
  EXPECT_EQ(RevisionOf(*a), kGpus);

  auto leases = b->List(Table::kLeases);
  ASSERT_TRUE(leases.ok());
  std::map<std::string, int> holders;
  for (const Row& row : *leases) ++holders[row.body];
  EXPECT_EQ(holders.size(), pool.size());
  for (const auto& [gpu, count] : holders) EXPECT_EQ(count, 1) << gpu;
  for (const std::string& gpu : pool) {
    EXPECT_EQ(Claim(*a, "late", {gpu}, true).code(), StatusCode::kAlreadyExists) << gpu;
  }
}

}  // namespace flyt::store::test
