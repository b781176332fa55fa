#include "remote/handle_table.h"

#include <gtest/gtest.h>

namespace flyt::remote {
namespace {

TEST(HandleTableTest, ZeroIsNeverAHandle) {
  HandleTable<int> table(4);
  EXPECT_EQ(table.Insert(0, 1), HandleInsert::kZero);
  EXPECT_EQ(table.Find(0), nullptr);
}

TEST(HandleTableTest, AHandleCannotBeTakenTwice) {
  HandleTable<int> table(4);
  EXPECT_EQ(table.Insert(7, 1), HandleInsert::kOk);
  EXPECT_EQ(table.Insert(7, 2), HandleInsert::kTaken);
  EXPECT_EQ(*table.Find(7), 1);
}

TEST(HandleTableTest, CapacityBoundsAHostileClient) {
  HandleTable<int> table(2);
  EXPECT_EQ(table.Insert(1, 1), HandleInsert::kOk);
  EXPECT_EQ(table.Insert(2, 2), HandleInsert::kOk);
  EXPECT_EQ(table.Insert(3, 3), HandleInsert::kFull);
  ASSERT_TRUE(table.Erase(1));
  EXPECT_EQ(table.Insert(3, 3), HandleInsert::kOk);
}

TEST(HandleTableTest, TablesOfTwoClientsAreIndependent) {
  HandleTable<int> a(4), b(4);
  ASSERT_EQ(a.Insert(5, 50), HandleInsert::kOk);
  EXPECT_EQ(b.Find(5), nullptr);  // client B cannot name client A's object
  EXPECT_EQ(b.Insert(5, 51), HandleInsert::kOk);
  EXPECT_EQ(*a.Find(5), 50);
  EXPECT_EQ(*b.Find(5), 51);
}

TEST(HandleTableTest, EraseIfAndTakeAll) {
  HandleTable<int> table(8);
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_EQ(table.Insert(i, static_cast<int>(i % 2)), HandleInsert::kOk);
  auto odd = table.EraseIf([](uint64_t, int v) { return v == 1; });
  EXPECT_EQ(odd.size(), 3u);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.TakeAll().size(), 2u);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.Erase(2));
}

}  // namespace
}  // namespace flyt::remote
