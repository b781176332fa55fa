// The CUDA runtime entry points flyt's libcudart.so.13 implements (kRemoted and kLocal in
// cudart_exports.def), declared once for the files that define them.
//
// The toolkit's cuda_runtime_api.h declares these without `noexcept`, and flyt's entry points are
// noexcept (an exception must never cross into a C caller), so the implementation files include
// only the toolkit's type headers and these declarations; signature_check.cc includes the
// toolkit's header (with its declarations renamed) and static_asserts that every prototype here
// matches NVIDIA's. The _ptsz / _ptds variants (per-thread default stream, used by programs
// built with --default-stream per-thread) have the signatures of their base functions.
#pragma once

#include <driver_types.h>
#include <vector_types.h>

#include <cstddef>

extern "C" {

// As in cuda_runtime_api.h (a type the type headers do not carry).
typedef void (*cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status, void* userData);

// ---- registration and launch (crt/host_runtime.h, crt/device_functions.h) -------------------
void** __cudaRegisterFatBinary(void* fatCubin) noexcept;
void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) noexcept;
void __cudaUnregisterFatBinary(void** fatCubinHandle) noexcept;
void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun,
                            const char* deviceName, int thread_limit, uint3* tid, uint3* bid,
                            dim3* bDim, dim3* gDim, int* wSize) noexcept;
void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress,
                       const char* deviceName, int ext, size_t size, int constant,
                       int global) noexcept;
void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char* deviceAddress,
                              const char* deviceName, int ext, size_t size, int constant,
                              int global) noexcept;
void __cudaRegisterHostVar(void** fatCubinHandle, const char* deviceName, char* hostVar,
                           size_t size) noexcept;
void __cudaRegisterUnifiedTable(void** fatCubinHandle, const char** names, void** table,
                                size_t count) noexcept;
char __cudaInitModule(void** fatCubinHandle) noexcept;
cudaError_t __cudaGetProcAddress(const char* symbol, void** funcPtr, int cudaVersion,
                                 unsigned long long flags) noexcept;  // NOLINT(runtime/int)
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) noexcept;
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) noexcept;
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) noexcept;
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) noexcept;
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream) noexcept;

// ---- cuda_runtime_api.h ---------------------------------------------------------------------
cudaError_t cudaChooseDevice(int *device, const struct cudaDeviceProp *prop) noexcept;
struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f) noexcept;
cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) noexcept;
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) noexcept;
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId) noexcept;
cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *pCacheConfig) noexcept;
cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit) noexcept;
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) noexcept;
cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *pConfig) noexcept;
cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) noexcept;
cudaError_t cudaDeviceReset(void) noexcept;
cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig) noexcept;
cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) noexcept;
cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config) noexcept;
cudaError_t cudaDeviceSynchronize(void) noexcept;
cudaError_t cudaDriverGetVersion(int *driverVersion) noexcept;
cudaError_t cudaEventCreate(cudaEvent_t *event) noexcept;
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) noexcept;
cudaError_t cudaEventDestroy(cudaEvent_t event) noexcept;
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) noexcept;
cudaError_t cudaEventQuery(cudaEvent_t event) noexcept;
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) noexcept;
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) noexcept;
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags) noexcept;
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) noexcept;
cudaError_t cudaEventSynchronize(cudaEvent_t event) noexcept;
cudaError_t cudaFree(void *devPtr) noexcept;
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) noexcept;
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream) noexcept;
cudaError_t cudaFreeHost(void *ptr) noexcept;
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) noexcept;
cudaError_t cudaFuncGetName(const char **name, const void *func) noexcept;
cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) noexcept;
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) noexcept;
cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig) noexcept;
cudaError_t cudaFuncSetSharedMemConfig(const void *func, enum cudaSharedMemConfig config) noexcept;
cudaError_t cudaGetDevice(int *device) noexcept;
cudaError_t cudaGetDeviceCount(int *count) noexcept;
cudaError_t cudaGetDeviceFlags(unsigned int *flags) noexcept;
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) noexcept;
const char* cudaGetErrorName(cudaError_t error) noexcept;
const char* cudaGetErrorString(cudaError_t error) noexcept;
cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr) noexcept;
cudaError_t cudaGetLastError(void) noexcept;
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol) noexcept;
cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol) noexcept;
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) noexcept;
cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) noexcept;
cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost) noexcept;
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) noexcept;
cudaError_t cudaHostUnregister(void *ptr) noexcept;
cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) noexcept;
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) noexcept;
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData) noexcept;
cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream) noexcept;
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) noexcept;
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args) noexcept;
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream) noexcept;
cudaError_t cudaMalloc(void **devPtr, size_t size) noexcept;
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) noexcept;
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream) noexcept;
cudaError_t cudaMallocHost(void **ptr, size_t size) noexcept;
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) noexcept;
// graph node parameters and topology: api_graph_nodes.cc
cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *pNodeParams) noexcept;
cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *pNodeParams) noexcept;
cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *pNodeParams) noexcept;
cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *pNodeParams) noexcept;
cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) noexcept;
cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) noexcept;
cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out) noexcept;
cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) noexcept;
cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes, cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes) noexcept;
cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to, cudaGraphEdgeData *edgeData, size_t *numEdges) noexcept;
cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData, size_t numDependencies) noexcept;
cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) noexcept;
cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *pNode, cudaGraphNode_t originalNode, cudaGraph_t clonedGraph) noexcept;
cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long *flags) noexcept;
cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags) noexcept;
cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept;
cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept;
cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const struct cudaHostNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const struct cudaMemsetParams *pNodeParams) noexcept;
cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, cudaEvent_t event) noexcept;
cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, cudaEvent_t event) noexcept;
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) noexcept;
cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags) noexcept;
cudaError_t cudaIpcCloseMemHandle(void *devPtr) noexcept;
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event) noexcept;
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle) noexcept;
// [issue 17: managed]
cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation location, unsigned int flags, cudaStream_t stream) noexcept;
cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count, struct cudaMemLocation location, unsigned int flags, cudaStream_t stream) noexcept;
cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice, struct cudaMemLocation location) noexcept;
cudaError_t cudaMemRangeGetAttribute(void *data, size_t dataSize, enum cudaMemRangeAttribute attribute, const void *devPtr, size_t count) noexcept;
cudaError_t cudaMemRangeGetAttributes(void **data, size_t *dataSizes, enum cudaMemRangeAttribute *attributes, size_t numAttributes, const void *devPtr, size_t count) noexcept;
// (end managed)
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) noexcept;
cudaError_t cudaMemGetInfo(size_t *free, size_t *total) noexcept;
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count) noexcept;
cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemset(void *devPtr, int value, size_t count) noexcept;
cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height) noexcept;
cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) noexcept;
cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream) noexcept;
cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width, size_t height) noexcept;
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) noexcept;
cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream) noexcept;
cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count) noexcept;
cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func, int numBlocks, int blockSize) noexcept;
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize) noexcept;
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags) noexcept;
cudaError_t cudaPeekAtLastError(void) noexcept;
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr) noexcept;
cudaError_t cudaProfilerStart(void) noexcept;
cudaError_t cudaProfilerStop(void) noexcept;
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) noexcept;
cudaError_t cudaSetDevice(int device) noexcept;
cudaError_t cudaSetDeviceFlags(unsigned int flags) noexcept;
cudaError_t cudaSetValidDevices(int *device_arr, int len) noexcept;
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData, unsigned int flags) noexcept;
cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void *userData, unsigned int flags) noexcept;
cudaError_t cudaStreamCreate(cudaStream_t *pStream) noexcept;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) noexcept;
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority) noexcept;
cudaError_t cudaStreamDestroy(cudaStream_t stream) noexcept;
cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device) noexcept;
cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device) noexcept;
cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) noexcept;
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags) noexcept;
cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long* streamId) noexcept;
cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long* streamId) noexcept;
cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority) noexcept;
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority) noexcept;
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) noexcept;
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) noexcept;
cudaError_t cudaStreamQuery(cudaStream_t stream) noexcept;
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) noexcept;
cudaError_t cudaStreamSynchronize(cudaStream_t stream) noexcept;
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) noexcept;
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) noexcept;
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) noexcept;
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) noexcept;

// [issue 17: graphs] stream capture and graphs (api_graphs.cc)
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) noexcept;
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode) noexcept;
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) noexcept;
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph) noexcept;
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out, cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out, const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out) noexcept;
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out, cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out, const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out) noexcept;
cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags) noexcept;
cudaError_t cudaGraphDestroy(cudaGraph_t graph) noexcept;
cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph) noexcept;
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, const struct cudaKernelNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, const struct cudaMemcpy3DParms *pCopyParams) noexcept;
cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, const struct cudaMemsetParams *pMemsetParams) noexcept;
cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, const struct cudaHostNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies) noexcept;
cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, cudaEvent_t event) noexcept;
cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, cudaEvent_t event) noexcept;
cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph, const cudaGraphNode_t *pDependencies, size_t numDependencies, cudaGraph_t childGraph) noexcept;
cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData, size_t numDependencies) noexcept;
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes) noexcept;
cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes, size_t *pNumRootNodes) noexcept;
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType) noexcept;
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies, cudaGraphEdgeData *edgeData, size_t *pNumDependencies) noexcept;
cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *pNodeParams) noexcept;
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) noexcept;
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) noexcept;
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept;
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept;
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) noexcept;
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph, cudaGraphExecUpdateResultInfo *resultInfo) noexcept;
cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const struct cudaKernelNodeParams *pNodeParams) noexcept;
// (end graphs)
// [issue 17: pools] stream-ordered pools, attributes, launch variants
cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps) noexcept;
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) noexcept;
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) noexcept;
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) noexcept;
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) noexcept;
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) noexcept;
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) noexcept;
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) noexcept;
cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) noexcept;
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device) noexcept;
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream) noexcept;
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream) noexcept;
cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaLaunchAttributeID attr, const cudaLaunchAttributeValue *value) noexcept;
cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaLaunchAttributeID attr, const cudaLaunchAttributeValue *value) noexcept;
cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaLaunchAttributeID attr, cudaLaunchAttributeValue *value_out) noexcept;
cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaLaunchAttributeID attr, cudaLaunchAttributeValue *value_out) noexcept;
cudaError_t cudaCtxResetPersistingL2Cache(void) noexcept;
cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) noexcept;
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus) noexcept;
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus) noexcept;
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus) noexcept;
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus) noexcept;
// (end pools)

}  // extern "C"

// [issue 17: arrays] entry points (runtime/api_arrays.cc)
#include <surface_types.h>
#include <texture_types.h>

extern "C" {
cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent, unsigned int *flags, cudaArray_t array) noexcept;
cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *pSurfObject, const struct cudaResourceDesc *pResDesc) noexcept;
cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject, const struct cudaResourceDesc *pResDesc, const struct cudaTextureDesc *pTexDesc, const struct cudaResourceViewDesc *pResViewDesc) noexcept;
cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) noexcept;
cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) noexcept;
cudaError_t cudaFreeArray(cudaArray_t array) noexcept;
cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray) noexcept;
cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array) noexcept;
cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t *levelArray, cudaMipmappedArray_const_t mipmappedArray, unsigned int level) noexcept;
cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaSurfaceObject_t surfObject) noexcept;
cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaTextureObject_t texObject) noexcept;
cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc *pResViewDesc, cudaTextureObject_t texObject) noexcept;
cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc, cudaTextureObject_t texObject) noexcept;
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent) noexcept;
cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, struct cudaExtent extent, unsigned int flags) noexcept;
cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width, size_t height, unsigned int flags) noexcept;
cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray, const struct cudaChannelFormatDesc *desc, struct cudaExtent extent, unsigned int numLevels, unsigned int flags) noexcept;
cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DFromArray_ptds(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy2DToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) noexcept;
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p) noexcept;
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyFromArray(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyFromArray_ptds(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyFromArrayAsync(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyFromArrayAsync_ptsz(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind) noexcept;
cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) noexcept;
cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent) noexcept;
cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent) noexcept;
cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream) noexcept;
cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream) noexcept;
}  // extern "C"
// (end arrays)
