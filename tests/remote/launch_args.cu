// Launches with known constant arguments, through every launch path a CUDA 13 program has:
// <<<>>> (the generated stub: __cudaPushCallConfiguration / __cudaGetKernel / __cudaLaunchKernel),
// cudaLaunchKernel, and cudaLaunchKernelEx. The e2e test compares flyt-gpu-server's launch log
// with the values below, byte for byte; on a real GPU the kernel writes what it received back and
// the program compares it itself.
#include <cstdint>

#include "check.h"

struct Mixed {
  char c;    // offset 0, then 7 bytes of padding
  double d;  // offset 8
  int i;     // offset 16, then 4 bytes of padding
};
struct alignas(16) Wide {
  float v[4];
};

struct Received {
  long long a, b, c, d;
  float e;
  double f;
  char gc;
  double gd;
  int gi;
  const void* p;
  int h;
  char k[4];
  float w[4];
  unsigned dims[6];
  unsigned dynamic_shared;
};

__global__ void Probe(int8_t a, int16_t b, int32_t c, int64_t d, float e, double f, Mixed g,
                      const int* p, bool h, char4 k, Wide w, Received* out) {
  extern __shared__ unsigned char scratch[];
  if (blockIdx.x + blockIdx.y + blockIdx.z + threadIdx.x + threadIdx.y + threadIdx.z != 0) return;
  out->a = a;
  out->b = b;
  out->c = c;
  out->d = d;
  out->e = e;
  out->f = f;
  out->gc = g.c;
  out->gd = g.d;
  out->gi = g.i;
  out->p = p;
  out->h = h;
  out->k[0] = k.x;
  out->k[1] = k.y;
  out->k[2] = k.z;
  out->k[3] = k.w;
  for (int i = 0; i < 4; ++i) out->w[i] = w.v[i];
  out->dims[0] = gridDim.x;
  out->dims[1] = gridDim.y;
  out->dims[2] = gridDim.z;
  out->dims[3] = blockDim.x;
  out->dims[4] = blockDim.y;
  out->dims[5] = blockDim.z;
  unsigned dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  out->dynamic_shared = dyn;
  // Touch the dynamic shared memory only when the launch gave some: with none, this store is an
  // illegal address on a GPU (the simulated device does not run kernels and never noticed).
  if (dyn > 0) scratch[0] = 1;
}

__global__ void NoArgs() {}

template <typename T>
__global__ void Fill(T* data, T value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

static void Verify(const Received& r, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shared, const int* p) {
  EXPECT_TRUE(r.a == -7 && r.b == 12345 && r.c == -2000000000 && r.d == 0x123456789ABCDEF0LL);
  EXPECT_TRUE(r.e == 3.5f && r.f == -0.125);
  EXPECT_TRUE(r.gc == 'Q' && r.gd == 2.75 && r.gi == 424242);
  EXPECT_TRUE(r.p == p && r.h == 1);
  EXPECT_TRUE(r.k[0] == 1 && r.k[1] == 2 && r.k[2] == 3 && r.k[3] == 4);
  EXPECT_TRUE(r.w[0] == 1.5f && r.w[1] == 2.5f && r.w[2] == 3.5f && r.w[3] == 4.5f);
  EXPECT_TRUE(r.dims[0] == gx && r.dims[1] == gy && r.dims[2] == gz);
  EXPECT_TRUE(r.dims[3] == bx && r.dims[4] == by && r.dims[5] == bz);
  EXPECT_TRUE(r.dynamic_shared == shared);
}

int main() {
  int* p = nullptr;
  Received* out = nullptr;
  CHECK(cudaMalloc(&p, 64));
  CHECK(cudaMalloc(&out, sizeof(Received)));
  std::printf("POINTER p=%p out=%p\n", static_cast<void*>(p), static_cast<void*>(out));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  int8_t a = -7;
  int16_t b = 12345;
  int32_t c = -2000000000;
  int64_t d = 0x123456789ABCDEF0LL;
  float e = 3.5f;
  double f = -0.125;
  Mixed g;
  std::memset(&g, 0, sizeof g);
  g.c = 'Q';
  g.d = 2.75;
  g.i = 424242;
  bool h = true;
  char4 k = make_char4(1, 2, 3, 4);
  Wide w = {{1.5f, 2.5f, 3.5f, 4.5f}};
  const bool sim = SimulatedDevice();
  Received r;

  // 1. The triple-chevron launch.
  Probe<<<dim3(3, 2, 1), dim3(32, 4, 2), 256, stream>>>(a, b, c, d, e, f, g, p, h, k, w, out);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));
  if (!sim) {
    CHECK(cudaMemcpy(&r, out, sizeof r, cudaMemcpyDeviceToHost));
    Verify(r, 3, 2, 1, 32, 4, 2, 256, p);
  }

  // 2. cudaLaunchKernel with an argument array.
  void* args[] = {&a, &b, &c, &d, &e, &f, &g, &p, &h, &k, &w, &out};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&Probe), dim3(7), dim3(64), args, 0,
                         nullptr));
  CHECK(cudaDeviceSynchronize());
  if (!sim) {
    CHECK(cudaMemcpy(&r, out, sizeof r, cudaMemcpyDeviceToHost));
    Verify(r, 7, 1, 1, 64, 1, 1, 0, p);
  }

  // 3. cudaLaunchKernelEx (cudaLaunchKernelExC underneath).
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(5, 1, 1);
  config.blockDim = dim3(128, 1, 1);
  config.dynamicSmemBytes = 1024;
  config.stream = stream;
  CHECK(cudaLaunchKernelEx(&config, Probe, a, b, c, d, e, f, g, p, h, k, w, out));
  CHECK(cudaStreamSynchronize(stream));
  if (!sim) {
    CHECK(cudaMemcpy(&r, out, sizeof r, cudaMemcpyDeviceToHost));
    Verify(r, 5, 1, 1, 128, 1, 1, 1024, p);
  }

  // 4. No arguments at all; a template instance.
  NoArgs<<<1, 1>>>();
  CHECK(cudaGetLastError());
  double* values = nullptr;
  CHECK(cudaMalloc(&values, 100 * sizeof(double)));
  Fill<double><<<1, 128>>>(values, 2.5, 100);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  if (!sim) {
    double back[100];
    CHECK(cudaMemcpy(back, values, sizeof back, cudaMemcpyDeviceToHost));
    for (double v : back) EXPECT_TRUE(v == 2.5);
  }
  std::printf("POINTER values=%p\n", static_cast<void*>(values));

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(values));
  CHECK(cudaFree(out));
  CHECK(cudaFree(p));
  std::printf("launch_args: 5 launches through 3 launch paths: PASS\n");
  return 0;
}
