#include "profile/cycle.h"

#include <gtest/gtest.h>

namespace flyt::profile {
namespace {
TEST(CycleTest, Placeholder) {}
}  // namespace
}  // namespace flyt::profile
