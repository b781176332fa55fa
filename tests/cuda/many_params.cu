// A kernel with many parameters of mixed sizes and alignments, and a struct passed by value.
// The remote runtime must copy each argument into the parameter buffer at the offset the
// compiler chose; fatbin_test.cc checks the parsed layout against this signature by hand, and
// this program checks on the host that every value arrived intact.
#include <cstdio>

#include "check.h"

struct Packed {
  char tag;      // offset 0
  double scale;  // offset 8
  int count;     // offset 16; sizeof(Packed) == 24, alignof == 8
};

// Parameter layout (ordinal: offset, size):
//  0 c: 0,1   1 s: 2,2   2 i: 4,4   3 d: 8,8   4 in: 16,8   5 p: 24,24
//  6 c2: 48,1 7 ll: 56,8 8 f: 64,4  9 out: 72,8            total 80 bytes
__global__ void ManyParams(char c, short s, int i, double d, const float* in, Packed p, char c2,
                           long long ll, float f, double* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  out[0] = c;
  out[1] = s;
  out[2] = i;
  out[3] = d;
  out[4] = in[0];
  out[5] = p.tag;
  out[6] = p.scale;
  out[7] = p.count;
  out[8] = c2;
  out[9] = static_cast<double>(ll);
  out[10] = f;
}

int main() {
  const float host_in = 2.5f;
  float* in = nullptr;
  double* out = nullptr;
  CHECK(cudaMalloc(&in, sizeof(float)));
  CHECK(cudaMalloc(&out, 11 * sizeof(double)));
  CHECK(cudaMemcpy(in, &host_in, sizeof(float), cudaMemcpyHostToDevice));
  Packed p{'P', 0.125, 77};
  ManyParams<<<1, 32>>>('A', -1234, 1 << 20, 3.25, in, p, 'z', -(1LL << 40), -7.5f, out);
  CHECK(cudaGetLastError());
  double got[11] = {};
  CHECK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
  const double want[11] = {
      'A', -1234, 1 << 20, 3.25, 2.5, 'P', 0.125, 77, 'z', static_cast<double>(-(1LL << 40)), -7.5};
  for (int k = 0; k < 11; ++k) {
    if (got[k] != want[k])
      FAIL("many_params: value %d arrived as %g, expected %g", k, got[k], want[k]);
  }
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
  std::printf("many_params: 10 mixed-size arguments and a 24-byte struct arrived intact: PASS\n");
  return 0;
}
