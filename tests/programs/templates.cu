// Templates (NVIDIA's simpleTemplates): one kernel template instantiated for int, float and
// double, with a functor template parameter and a compile-time block size; each instantiation is
// its own kernel in the module and launches by its own host stub.
#include <vector>

#include "program.h"

template <typename T>
struct Axpy {
  T a;
  __device__ T operator()(T x, T y) const { return a * x + y; }
};

template <typename T>
struct MaxOf {
  __device__ T operator()(T x, T y) const { return x > y ? x : y; }
};

template <typename T, typename Op, int kBlock>
__global__ void Combine(const T* x, const T* y, T* out, int n, Op op) {
  const int i = blockIdx.x * kBlock + threadIdx.x;
  if (i < n) out[i] = op(x[i], y[i]);
}

template <typename T, typename Op, typename HostOp>
void Run(const char* what, Op op, HostOp host_op) {
  constexpr int kBlock = 128;
  const int n = 3000;
  std::vector<T> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<T>(i % 17);
    y[i] = static_cast<T>((i * 3) % 23);
  }
  T *dx, *dy, *dout;
  CHECK(cudaMalloc(&dx, n * sizeof(T)));
  CHECK(cudaMalloc(&dy, n * sizeof(T)));
  CHECK(cudaMalloc(&dout, n * sizeof(T)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  cudaFuncAttributes attr{};
  CHECK(cudaFuncGetAttributes(&attr, Combine<T, Op, kBlock>));
  if (attr.maxThreadsPerBlock < kBlock) FAIL("%s: %d threads", what, attr.maxThreadsPerBlock);
  Combine<T, Op, kBlock><<<(n + kBlock - 1) / kBlock, kBlock>>>(dx, dy, dout, n, op);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(T), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      if (out[i] != host_op(x[i], y[i])) FAIL("%s: out[%d] wrong", what, i);
    }
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(dout));
}

int main() {
  Run<int>("int axpy", Axpy<int>{3}, [](int x, int y) { return 3 * x + y; });
  Run<float>("float axpy", Axpy<float>{0.5f}, [](float x, float y) { return 0.5f * x + y; });
  Run<double>("double axpy", Axpy<double>{-2.0}, [](double x, double y) { return -2.0 * x + y; });
  Run<int>("int max", MaxOf<int>{}, [](int x, int y) { return x > y ? x : y; });
  Run<double>("double max", MaxOf<double>{}, [](double x, double y) { return x > y ? x : y; });
  PASS();
}
