#include <gtest/gtest.h>
TEST(RuntimeSim, Placeholder) {}
