// The tracer's kernel test program: three kernels (one a template, instantiated twice) launched
// an exact number of times with known shapes on three streams, and an exact number of syncs. No
// copies or memsets, so that every sync is an explicit one. The figures (expectations.py,
// "trace_kernels"), per --repeat R (default 1); streams: legacy = the legacy default stream (0),
// blocking = cudaStreamCreate, nonblocking = cudaStreamCreateWithFlags(cudaStreamNonBlocking):
//
//   kernel (demangled)                          grid      block     shared  stream       launches
//   Axpy(float, float const*, float*, int)      64,1,1    256,1,1   0       legacy       5R
//   Axpy(float, float const*, float*, int)      32,1,1    128,1,1   0       blocking     3R
//   void Scale<float, 4>(float*, float, int)    16,2,1    32,4,1    0       blocking     4R
//   void Scale<double, 2>(double*, double, int) 8,1,1     64,1,1    0       nonblocking  2R
//   Reduce(float const*, float*, int)           10,1,1    128,1,1   512     nonblocking  6R
//   Reduce(float const*, float*, int)           4,1,1     256,1,1   1024    nonblocking  2R  (cudaLaunchKernelExC)
//   total 22R launches: legacy 5R, blocking 7R, nonblocking 10R.
//
//   syncs per repeat: cudaStreamSynchronize(blocking) ×2, (nonblocking) ×1, (legacy) ×1;
//   cudaDeviceSynchronize ×2; cudaEventRecord(ev, nonblocking) ×1 then cudaEventSynchronize(ev) ×1
//   and cudaEventQuery(ev) ×1 (cudaSuccess): 8R syncs (a record is not a sync).
//   memory: cudaMalloc x 16,384, y 16,384, d 32,768, out 16,384 (81,920 bytes, 4 allocations),
//   all freed before exit (4 frees); 2 streams and 1 event created and destroyed.
//
// <<<>>> launches reach the runtime as __cudaLaunchKernel (CUDA 13: a kernel handle from
// __cudaGetKernel), or __cudaLaunchKernel_ptsz in the per-thread build (trace_kernels_ptds, where
// "legacy" is the thread's per-thread default stream); cudaLaunchKernelEx reaches it as
// cudaLaunchKernelExC with the host stub's address.
#include <cstdio>

#include "trace_program.h"

__global__ void Axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

template <typename T, int kUnroll>
__global__ void Scale(T* data, T factor, int n) {
  const int base = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x * blockDim.y * kUnroll;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int i = base + k * blockDim.x * blockDim.y + t;
    if (i < n) data[i] *= factor;
  }
}

__global__ void Reduce(const float* in, float* out, int n) {
  extern __shared__ float partial[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

int main(int argc, char** argv) {
  trace_test::ParseOptions(argc, argv);
  const int n = 4096;
  float *x = nullptr, *y = nullptr, *out = nullptr;
  double* d = nullptr;
  CALL("cudaMalloc", cudaMalloc(&x, n * sizeof(float)));
  CALL("cudaMalloc", cudaMalloc(&y, n * sizeof(float)));
  CALL("cudaMalloc", cudaMalloc(&d, n * sizeof(double)));
  CALL("cudaMalloc", cudaMalloc(&out, n * sizeof(float)));
  cudaStream_t blocking = nullptr, nonblocking = nullptr;
  CALL("cudaStreamCreate", cudaStreamCreate(&blocking));
  CALL("cudaStreamCreateWithFlags",
       cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  cudaEvent_t event = nullptr;
  CALL("cudaEventCreate", cudaEventCreate(&event));
  trace_test::PrintHandle("legacy", nullptr);
  trace_test::PrintHandle("blocking", blocking);
  trace_test::PrintHandle("nonblocking", nonblocking);
  std::fflush(stdout);

  for (int r = 0; r < trace_test::Opts().repeat; ++r) {
    for (int i = 0; i < 5; ++i) {
      Axpy<<<64, 256>>>(2.0f, x, y, n);
      LAUNCHED("cudaLaunchKernel");
    }
    for (int i = 0; i < 3; ++i) {
      Axpy<<<32, 128, 0, blocking>>>(0.5f, x, y, n);
      LAUNCHED("cudaLaunchKernel");
    }
    for (int i = 0; i < 4; ++i) {
      Scale<float, 4><<<dim3(16, 2, 1), dim3(32, 4, 1), 0, blocking>>>(y, 1.5f, n);
      LAUNCHED("cudaLaunchKernel");
    }
    CALL("cudaStreamSynchronize", cudaStreamSynchronize(blocking));
    for (int i = 0; i < 2; ++i) {
      Scale<double, 2><<<8, 64, 0, nonblocking>>>(d, 0.25, n);
      LAUNCHED("cudaLaunchKernel");
    }
    for (int i = 0; i < 6; ++i) {
      Reduce<<<10, 128, 512, nonblocking>>>(x, out, n);
      LAUNCHED("cudaLaunchKernel");
    }
    for (int i = 0; i < 2; ++i) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(4, 1, 1);
      config.blockDim = dim3(256, 1, 1);
      config.dynamicSmemBytes = 1024;
      config.stream = nonblocking;
      CALL("cudaLaunchKernelExC", cudaLaunchKernelEx(&config, Reduce, (const float*)x, out, n));
    }
    CALL("cudaEventRecord", cudaEventRecord(event, nonblocking));
    CALL("cudaEventSynchronize", cudaEventSynchronize(event));
    CALL("cudaEventQuery", cudaEventQuery(event));
    CALL("cudaStreamSynchronize", cudaStreamSynchronize(nonblocking));
    CALL("cudaStreamSynchronize", cudaStreamSynchronize(blocking));
    CALL("cudaStreamSynchronize", cudaStreamSynchronize(0));
    CALL("cudaDeviceSynchronize", cudaDeviceSynchronize());
    CALL("cudaDeviceSynchronize", cudaDeviceSynchronize());
  }

  CALL("cudaEventDestroy", cudaEventDestroy(event));
  CALL("cudaStreamDestroy", cudaStreamDestroy(blocking));
  CALL("cudaStreamDestroy", cudaStreamDestroy(nonblocking));
  CALL("cudaFree", cudaFree(x));
  CALL("cudaFree", cudaFree(y));
  CALL("cudaFree", cudaFree(d));
  CALL("cudaFree", cudaFree(out));
  return trace_test::Pass("trace_kernels");
}
