#include <gtest/gtest.h>
TEST(Exports, Placeholder) {}
