#include "runtime/error_state.h"

#include <gtest/gtest.h>

#include <thread>

namespace flyt::runtime {
namespace {

TEST(ErrorStateTest, LastErrorIsReturnedOnceThenReset) {
  ErrorState state;
  EXPECT_EQ(state.GetLast(), CudaError::kSuccess);
  EXPECT_EQ(state.Record(CudaError::kInvalidValue), CudaError::kInvalidValue);
  EXPECT_EQ(state.PeekLast(), CudaError::kInvalidValue);
  EXPECT_EQ(state.PeekLast(), CudaError::kInvalidValue);
  EXPECT_EQ(state.GetLast(), CudaError::kInvalidValue);
  EXPECT_EQ(state.GetLast(), CudaError::kSuccess);
}

TEST(ErrorStateTest, SuccessAndNotReadyDoNotOverwriteTheLastError) {
  ErrorState state;
  state.Record(CudaError::kMemoryAllocation);
  state.Record(CudaError::kSuccess);
  state.Record(CudaError::kNotReady);
  EXPECT_EQ(state.GetLast(), CudaError::kMemoryAllocation);
  state.Record(CudaError::kNotReady);
  EXPECT_EQ(state.GetLast(), CudaError::kSuccess);
}

TEST(ErrorStateTest, TheLatestErrorWins) {
  ErrorState state;
  state.Record(CudaError::kInvalidValue);
  state.Record(CudaError::kInvalidDevice);
  EXPECT_EQ(state.GetLast(), CudaError::kInvalidDevice);
}

TEST(ErrorStateTest, StickyErrorsStayUntilReset) {
  ErrorState state;
  EXPECT_EQ(state.Sticky(), CudaError::kSuccess);
  state.Record(CudaError::kIllegalAddress);
  EXPECT_EQ(state.Sticky(), CudaError::kIllegalAddress);
  EXPECT_EQ(state.GetLast(), CudaError::kIllegalAddress);
  // Resetting the last error does not clear a sticky one.
  EXPECT_EQ(state.GetLast(), CudaError::kIllegalAddress);
  state.Record(CudaError::kInvalidValue);
  EXPECT_EQ(state.PeekLast(), CudaError::kIllegalAddress);
  // The first sticky error is the one kept.
  state.Record(CudaError::kLaunchFailure);
  EXPECT_EQ(state.Sticky(), CudaError::kIllegalAddress);
  state.ClearSticky();
  EXPECT_EQ(state.Sticky(), CudaError::kSuccess);
  EXPECT_EQ(state.GetLast(), CudaError::kSuccess);
}

TEST(ErrorStateTest, LastErrorIsPerThreadStickyIsPerProcess) {
  ErrorState state;
  state.Record(CudaError::kInvalidValue);
  std::thread other([&] {
    EXPECT_EQ(state.GetLast(), CudaError::kSuccess);  // not this thread's error
    state.Record(CudaError::kLaunchFailure);
  });
  other.join();
  EXPECT_EQ(state.Sticky(), CudaError::kLaunchFailure);
  EXPECT_EQ(state.GetLast(), CudaError::kLaunchFailure);  // sticky shows everywhere
  state.ClearSticky();
}

}  // namespace
}  // namespace flyt::runtime
