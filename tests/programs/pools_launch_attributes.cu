// cudaLaunchKernelExC with launch attributes: a thread-block cluster (compute capability 9.0),
// a priority, a hint that is accepted and ignored, a cluster the grid is not a multiple of
// (cudaErrorInvalidClusterSize) and an attribute CUDA does not know (cudaErrorInvalidValue).
#include "program.h"

__global__ void Plain(int* x, int v) { x[blockIdx.x * blockDim.x + threadIdx.x] = v; }

int main() {
  int major = 0;
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  int* x = nullptr;
  CHECK(cudaMalloc(&x, 64 * 128 * sizeof(int)));
  int v = 7;
  void* args[] = {&x, &v};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(64);
  config.blockDim = dim3(128);
  cudaLaunchAttribute attrs[3]{};
  attrs[0].id = cudaLaunchAttributePriority;
  attrs[0].val.priority = 0;
  attrs[1].id = cudaLaunchAttributeMemSyncDomain;
  attrs[1].val.memSyncDomain = cudaLaunchMemSyncDomainDefault;
  attrs[2].id = cudaLaunchAttributeClusterDimension;
  attrs[2].val.clusterDim.x = 2;
  attrs[2].val.clusterDim.y = 1;
  attrs[2].val.clusterDim.z = 1;
  config.attrs = attrs;
  config.numAttrs = major >= 9 ? 3 : 2;
  CHECK(cudaLaunchKernelExC(&config, reinterpret_cast<void*>(Plain), args));
  CHECK(cudaDeviceSynchronize());
  int host[4] = {};
  CHECK(cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost));
  if (KERNELS_RUN && host[3] != 7) FAIL("launch with attributes did not run: %d", host[3]);

  if (major >= 9) {
    attrs[2].val.clusterDim.x = 3;  // 64 blocks are not whole clusters of 3
    config.attrs = &attrs[2];
    config.numAttrs = 1;
    EXPECT_ERR(cudaLaunchKernelExC(&config, reinterpret_cast<void*>(Plain), args),
               cudaErrorInvalidClusterSize);
    (void)cudaGetLastError();
  }
  cudaLaunchAttribute unknown{};
  unknown.id = static_cast<cudaLaunchAttributeID>(1000);
  config.attrs = &unknown;
  config.numAttrs = 1;
  EXPECT_ERR(cudaLaunchKernelExC(&config, reinterpret_cast<void*>(Plain), args),
             cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaFree(x));
  CHECK(cudaDeviceSynchronize());
  PASS();
}
