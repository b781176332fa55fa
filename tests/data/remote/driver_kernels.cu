// Kernels for the driver backend's GPU test (src/remote/driver_backend_test.cc). The test
// loads the prebuilt container driver_kernels.fatbin beside this file through the backend's
// ModuleLoad, exactly as flyt-gpu-server loads a client's registered fatbin. Regenerate it with
//
//   nvcc -fatbin -o driver_kernels.fatbin driver_kernels.cu \
//     -gencode arch=compute_75,code=[sm_75,compute_75] -gencode arch=compute_80,code=sm_80 \
//     -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=sm_100 \
//     -gencode arch=compute_120,code=sm_120
//
// (cubins for the common data-centre and desktop generations, and compute_75 PTX that the driver
// JIT-compiles for anything else). The parameter layouts below are what the test writes by hand.

// Scale of the axpy result; a __constant__ the test sets through ModuleGetGlobal.
__constant__ float flyt_scale;
// Incremented once per thread by flyt_count; a __device__ global the test reads back.
__device__ unsigned int flyt_counter;

// y[i] = flyt_scale * (a * x[i] + y[i]).
// Layout: a @0 (4), x @8 (8), y @16 (8), n @24 (4): 28 bytes.
extern "C" __global__ void flyt_axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = flyt_scale * (a * x[i] + y[i]);
}

// Mixed sizes and alignments; a C++ (mangled) name: _Z10flyt_mixedcdPx.
// Layout: c @0 (1), d @8 (8), out @16 (8): 24 bytes.
__global__ void flyt_mixed(char c, double d, long long* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = c;
    out[1] = static_cast<long long>(d * 1000.0);
  }
}

// No parameters: counts threads into flyt_counter.
extern "C" __global__ void flyt_count() { atomicAdd(&flyt_counter, 1u); }
