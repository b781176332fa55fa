// Pitched 2D memory (NVIDIA's simplePitchLinearTexture's copies, without the texture): a matrix
// copied from a packed host array into pitched device memory, scaled in place by a kernel that
// walks rows by the pitch, copied pitched-to-pitched, memset by rectangle, and copied back.
#include <vector>

#include "program.h"

__global__ void ScaleRows(float* data, size_t pitch_bytes, int width, int height, float factor) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < width && y < height) {
    float* row = reinterpret_cast<float*>(reinterpret_cast<char*>(data) + y * pitch_bytes);
    row[x] *= factor;
  }
}

int main() {
  const int width = 301, height = 77;  // a row is not a multiple of any pitch alignment
  const size_t row_bytes = width * sizeof(float);
  std::vector<float> host(width * height), back(width * height, -1.0f);
  for (int i = 0; i < width * height; ++i) host[i] = static_cast<float>(i % 1000);
  float* a = nullptr;
  float* b = nullptr;
  size_t pitch_a = 0, pitch_b = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&a), &pitch_a, row_bytes, height));
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&b), &pitch_b, row_bytes, height));
  if (pitch_a < row_bytes || pitch_b < row_bytes) FAIL("pitch %zu < row %zu", pitch_a, row_bytes);
  CHECK(cudaMemcpy2D(a, pitch_a, host.data(), row_bytes, row_bytes, height,
                     cudaMemcpyHostToDevice));
  const dim3 block(32, 8);
  const dim3 grid((width + block.x - 1) / block.x, (height + block.y - 1) / block.y);
  ScaleRows<<<grid, block>>>(a, pitch_a, width, height, 2.0f);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy2D(b, pitch_b, a, pitch_a, row_bytes, height, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy2D(back.data(), row_bytes, b, pitch_b, row_bytes, height,
                     cudaMemcpyDeviceToHost));
  for (int i = 0; i < width * height; ++i) {
    const float want = KERNELS_RUN ? 2.0f * host[i] : host[i];
    if (back[i] != want) FAIL("element %d = %f, expected %f", i, back[i], want);
  }
  // A rectangle inside: columns 10..19 of rows 5..9 set to zero bytes, the rest untouched.
  CHECK(cudaMemset2D(reinterpret_cast<char*>(b) + 5 * pitch_b + 10 * sizeof(float), pitch_b, 0,
                     10 * sizeof(float), 5));
  // Copied back into a host layout with its own wider pitch.
  const size_t host_pitch = row_bytes + 12;
  std::vector<char> wide(host_pitch * height, 0x7f);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemcpy2DAsync(wide.data(), host_pitch, b, pitch_b, row_bytes, height,
                          cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (int y = 0; y < height; ++y) {
    const float* row = reinterpret_cast<const float*>(wide.data() + y * host_pitch);
    for (int x = 0; x < width; ++x) {
      const bool zeroed = y >= 5 && y < 10 && x >= 10 && x < 20;
      const float scaled = KERNELS_RUN ? 2.0f * host[y * width + x] : host[y * width + x];
      const float want = zeroed ? 0.0f : scaled;
      if (row[x] != want) FAIL("(%d,%d) = %f, expected %f", x, y, row[x], want);
    }
    for (size_t gap = row_bytes; gap < host_pitch; ++gap) {
      if (wide[y * host_pitch + gap] != 0x7f) FAIL("row %d: the host pitch gap was written", y);
    }
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  PASS();
}
