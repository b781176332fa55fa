// The device-side half of the -rdc=true program: a device function and a device variable used
// from another translation unit, and a kernel of its own.
__device__ int g_calls = 0;

__device__ float Smooth(float left, float mid, float right) {
  atomicAdd(&g_calls, 1);
  return 0.25f * left + 0.5f * mid + 0.25f * right;
}

__global__ void ResetCalls() { g_calls = 0; }
