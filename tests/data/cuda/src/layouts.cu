// Kernels whose parameter layouts and resources stress the parser: a parameter larger than
// 16 KiB (EIATTR_KPARAM_INFO_V2), over- and under-aligned structs, a trailing char, vector
// types, launch bounds, static and dynamic shared memory, no parameters at all.
// Compiled by regenerate.sh into layouts.fatbin; the expected values are in fatbin_test.cc.
#include <cuda_fp16.h>

struct Big {
  int v[5000];  // 20000 bytes
};
struct Odd {
  char v[3];  // size 3, align 1
};
struct alignas(16) Wide {
  float x, y, z, w;  // size 16, align 16
};

// 0: 0,20000   1: 20000,8   → 20008 bytes
__global__ void __launch_bounds__(256, 2) BigParam(Big b, int* out) { out[0] = b.v[4999]; }

// 0: 0,3   1: 16,16   2: 32,1   3: 48,16   4: 64,8   5: 72,2   6: 80,16   7: 96,1 → 97 bytes
__global__ void __launch_bounds__(128)
    Aligned(Odd o, Wide w, char c, Wide w2, int* out, __half h, float4 f4, bool flag) {
  __shared__ float tile[64];
  tile[threadIdx.x % 64] = w.x + o.v[2] + c + w2.w + __half2float(h) + f4.w + flag;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 64];
}

extern __shared__ float dynamic_smem[];
__global__ void DynamicShared(float* out) {
  dynamic_smem[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = dynamic_smem[(threadIdx.x + 1) % blockDim.x];
}

__global__ void NoParams() {}
