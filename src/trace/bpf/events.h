/* The records the CUDA tracer's BPF program writes into its one ring buffer, shared word for word
 * by cuda_trace.bpf.c (compiled by clang for the BPF target) and the user-space tracer (C++). This
 * file is the contract between the two halves: change a layout only together with both sides and
 * FLYT_TRACE_ABI_VERSION.
 *
 * Every record starts with struct flyt_trace_header; `kind` says which struct follows.
 * Call records (alloc, free, copy, ...) are written when the probed call RETURNS, with its return
 * code in `rc` (0 = success); their arguments were saved at entry. Kernel launches are written at
 * ENTRY (flag FLYT_F_AT_ENTRY, rc 0: the result is not read) unless the tracer was started with
 * launch results on, which records them at return like the rest. Only the outermost probed call of
 * a thread is written: a runtime call that reaches another probed function (the runtime calling
 * the driver, or one runtime entry point calling another, by a call or a tail jump) is recorded
 * once.
 *
 * Plain C: no C++ in here, fixed-width types only, every struct naturally aligned (no padding
 * holes: the BPF and x86-64 layouts are the same). */
#ifndef FLYT_TRACE_BPF_EVENTS_H_
#define FLYT_TRACE_BPF_EVENTS_H_

#ifdef __cplusplus
#include <cstdint>
typedef uint8_t flyt_u8;
typedef uint16_t flyt_u16;
typedef uint32_t flyt_u32;
typedef int32_t flyt_s32;
typedef uint64_t flyt_u64;
#else
typedef __u8 flyt_u8;
typedef __u16 flyt_u16;
typedef __u32 flyt_u32;
typedef __s32 flyt_s32;
typedef __u64 flyt_u64;
#endif

#define FLYT_TRACE_ABI_VERSION 1
#define FLYT_TRACE_NAME_BYTES 256 /* kernel names, paths; longer ones are cut, flagged */
#define FLYT_TRACE_ENV_BYTES 128  /* "NAME=value" of a watched environment variable */
#define FLYT_TRACE_ENVIRON_BYTES 32768 /* a process's whole environment; a longer one is cut */
#define FLYT_TRACE_ENVIRON_CHUNK 4096  /* read a page-sized piece at a time */

/* What follows the header. */
enum flyt_trace_kind {
  FLYT_EV_LAUNCH = 1,            /* struct flyt_trace_launch */
  FLYT_EV_ALLOC = 2,             /* struct flyt_trace_alloc */
  FLYT_EV_FREE = 3,              /* struct flyt_trace_free */
  FLYT_EV_COPY = 4,              /* struct flyt_trace_copy (memcpy) */
  FLYT_EV_MEMSET = 5,            /* struct flyt_trace_copy (dst, bytes; src = value) */
  FLYT_EV_SYNC = 6,              /* struct flyt_trace_sync */
  FLYT_EV_EVENT_RECORD = 7,      /* struct flyt_trace_event_record */
  FLYT_EV_STREAM_CREATE = 8,     /* struct flyt_trace_stream */
  FLYT_EV_STREAM_DESTROY = 9,    /* struct flyt_trace_stream */
  FLYT_EV_SET_DEVICE = 10,       /* struct flyt_trace_set_device */
  FLYT_EV_REGISTER_FUNCTION = 11,/* struct flyt_trace_name: stub (host function) -> device name */
  FLYT_EV_GET_KERNEL = 12,       /* struct flyt_trace_get_kernel: kernel handle -> stub */
  FLYT_EV_MODULE_FUNCTION = 13,  /* struct flyt_trace_name: CUfunction -> name (driver API) */
  FLYT_EV_SETENV = 14,           /* struct flyt_trace_env (setenv/putenv of a CUDA_ variable) */
  FLYT_EV_EXEC = 15,             /* struct flyt_trace_path: a process exec'd (control) */
  FLYT_EV_LIBRARY_OPEN = 16,     /* struct flyt_trace_path: a process opened libcuda* (control) */
  FLYT_EV_EXIT = 17,             /* header only: a traced process's leader exited; rc = exit code */
  FLYT_EV_ENVIRON = 18,          /* struct flyt_trace_environ: its environment, just before each
                                    LIBRARY_OPEN record (control) */
};

/* Which probed function a record came from (`func`). The attach cookie of every probe is
 *   func | library_class << 16 | code_before << 24 | code_after << 44
 * so the BPF side knows both without a lookup; code_before/code_after (20 bits each, in 16-byte
 * units, clamped) are the distances from the function back to the start and on to the end of the
 * code section holding it: the BPF side learns from them where a runtime's code lies in the
 * process, to tell a driver call made by the runtime from one the program made itself. */
enum flyt_trace_func {
  FLYT_FN_NONE = 0,
  /* Launches. */
  FLYT_FN_cudaLaunchKernel = 1,
  FLYT_FN_cudaLaunchKernel_ptsz,
  FLYT_FN___cudaLaunchKernel,       /* CUDA 13 nvcc stubs: first argument is a kernel handle */
  FLYT_FN___cudaLaunchKernel_ptsz,
  FLYT_FN_cudaLaunchKernelExC,
  FLYT_FN_cudaLaunchKernelExC_ptsz,
  FLYT_FN_cudaLaunchCooperativeKernel,
  FLYT_FN_cudaLaunchCooperativeKernel_ptsz,
  FLYT_FN_cudaGraphLaunch,
  FLYT_FN_cudaGraphLaunch_ptsz,
  FLYT_FN_cuLaunchKernel,
  FLYT_FN_cuLaunchKernel_ptsz,
  FLYT_FN_cuLaunchKernelEx,
  FLYT_FN_cuLaunchKernelEx_ptsz,
  FLYT_FN_cuGraphLaunch,
  FLYT_FN_cuGraphLaunch_ptsz,
  /* Memory. */
  FLYT_FN_cudaMalloc = 32,
  FLYT_FN_cudaFree,
  FLYT_FN_cudaMallocAsync,
  FLYT_FN_cudaMallocAsync_ptsz,
  FLYT_FN_cudaFreeAsync,
  FLYT_FN_cudaFreeAsync_ptsz,
  FLYT_FN_cudaMallocFromPoolAsync,
  FLYT_FN_cudaMallocFromPoolAsync_ptsz,
  FLYT_FN_cudaMallocManaged,
  FLYT_FN_cudaMallocPitch,
  FLYT_FN_cudaMallocHost,
  FLYT_FN_cudaHostAlloc,
  FLYT_FN_cudaFreeHost,
  FLYT_FN_cuMemAlloc_v2,
  FLYT_FN_cuMemFree_v2,
  /* Copies and memsets. */
  FLYT_FN_cudaMemcpy = 64,
  FLYT_FN_cudaMemcpy_ptds,
  FLYT_FN_cudaMemcpyAsync,
  FLYT_FN_cudaMemcpyAsync_ptsz,
  FLYT_FN_cudaMemset,
  FLYT_FN_cudaMemset_ptds,
  FLYT_FN_cudaMemsetAsync,
  FLYT_FN_cudaMemsetAsync_ptsz,
  /* Syncs and streams. */
  FLYT_FN_cudaStreamSynchronize = 96,
  FLYT_FN_cudaStreamSynchronize_ptsz,
  FLYT_FN_cudaDeviceSynchronize,
  FLYT_FN_cudaEventRecord,
  FLYT_FN_cudaEventRecord_ptsz,
  FLYT_FN_cudaEventSynchronize,
  FLYT_FN_cudaEventQuery,
  FLYT_FN_cuStreamSynchronize,
  FLYT_FN_cuStreamSynchronize_ptsz,
  FLYT_FN_cuCtxSynchronize,
  FLYT_FN_cudaStreamCreate,
  FLYT_FN_cudaStreamCreateWithFlags,
  FLYT_FN_cudaStreamCreateWithPriority,
  FLYT_FN_cudaStreamDestroy,
  FLYT_FN_cuStreamCreate,             /* (CUstream*, unsigned flags): CU_STREAM_NON_BLOCKING = 1 */
  FLYT_FN_cuStreamCreateWithPriority, /* (CUstream*, unsigned flags, int priority) */
  FLYT_FN_cuStreamDestroy_v2,
  /* Device selection, names. */
  FLYT_FN_cudaSetDevice = 128,
  FLYT_FN___cudaRegisterFunction,
  FLYT_FN___cudaGetKernel,
  FLYT_FN_cudaGetKernel,
  FLYT_FN_cuModuleGetFunction,
  FLYT_FN_setenv,
  FLYT_FN_putenv,
  FLYT_FN_COUNT = 160
};

/* Which kind of file a probe sits in (cookie bits 16..23). */
enum flyt_trace_library_class {
  FLYT_LIB_NVIDIA_RUNTIME = 1, /* libcudart.so* (NVIDIA's, or a wheel's libcudart-<hash>.so.N) */
  FLYT_LIB_FLYT_RUNTIME = 2,   /* flyt's libcudart.so.13: the GPU is remote (flyt-gpu-server) */
  FLYT_LIB_DRIVER = 3,         /* libcuda.so.1 */
  FLYT_LIB_STATIC_RUNTIME = 4, /* an executable linked with -cudart=static (.symtab) */
  FLYT_LIB_LIBC = 5,           /* setenv/putenv */
};

/* cudaMemcpyKind as the program passed it (driver-API copies set it from their name). */
enum flyt_trace_copy_kind {
  FLYT_COPY_HOST_TO_HOST = 0,
  FLYT_COPY_HOST_TO_DEVICE = 1,
  FLYT_COPY_DEVICE_TO_HOST = 2,
  FLYT_COPY_DEVICE_TO_DEVICE = 3,
  FLYT_COPY_DEFAULT = 4, /* inferred from the pointers by user space */
};

enum flyt_trace_memory {
  FLYT_MEM_DEVICE = 0,
  FLYT_MEM_MANAGED = 1,
  FLYT_MEM_HOST_PINNED = 2,
};

struct flyt_trace_header {
  flyt_u64 ts_ns;     /* bpf_ktime_get_ns() when written (CLOCK_MONOTONIC) */
  flyt_u64 cgroup_id; /* bpf_get_current_cgroup_id(): cgroup v2 id (the directory's inode) */
  flyt_u64 entry_ns;  /* at entry for launches, copies, memsets, syncs; else = ts_ns */
  flyt_u32 pid;       /* tgid, as the root PID namespace sees it */
  flyt_u32 tid;
  flyt_u16 kind;      /* enum flyt_trace_kind */
  flyt_u16 func;      /* enum flyt_trace_func */
  flyt_u16 library;   /* enum flyt_trace_library_class */
  flyt_u16 flags;     /* FLYT_F_* */
  flyt_s32 rc;        /* the call's return code (cudaError_t / CUresult), exit code for EXIT */
  flyt_u32 reserved;
};

/* The kind of the records a probed function writes (0: none): the one list both halves use (the
 * BPF side picks the record to write by it, user space checks each record against it). */
static inline __attribute__((always_inline)) flyt_u16 flyt_trace_kind_of(flyt_u32 func) {
  if (func >= FLYT_FN_cudaLaunchKernel && func <= FLYT_FN_cuGraphLaunch_ptsz) return FLYT_EV_LAUNCH;
  switch (func) {
    case FLYT_FN_cudaMalloc:
    case FLYT_FN_cudaMallocAsync:
    case FLYT_FN_cudaMallocAsync_ptsz:
    case FLYT_FN_cudaMallocFromPoolAsync:
    case FLYT_FN_cudaMallocFromPoolAsync_ptsz:
    case FLYT_FN_cudaMallocManaged:
    case FLYT_FN_cudaMallocPitch:
    case FLYT_FN_cudaMallocHost:
    case FLYT_FN_cudaHostAlloc:
    case FLYT_FN_cuMemAlloc_v2: return FLYT_EV_ALLOC;
    case FLYT_FN_cudaFree:
    case FLYT_FN_cudaFreeAsync:
    case FLYT_FN_cudaFreeAsync_ptsz:
    case FLYT_FN_cudaFreeHost:
    case FLYT_FN_cuMemFree_v2: return FLYT_EV_FREE;
    case FLYT_FN_cudaMemcpy:
    case FLYT_FN_cudaMemcpy_ptds:
    case FLYT_FN_cudaMemcpyAsync:
    case FLYT_FN_cudaMemcpyAsync_ptsz: return FLYT_EV_COPY;
    case FLYT_FN_cudaMemset:
    case FLYT_FN_cudaMemset_ptds:
    case FLYT_FN_cudaMemsetAsync:
    case FLYT_FN_cudaMemsetAsync_ptsz: return FLYT_EV_MEMSET;
    case FLYT_FN_cudaStreamSynchronize:
    case FLYT_FN_cudaStreamSynchronize_ptsz:
    case FLYT_FN_cudaDeviceSynchronize:
    case FLYT_FN_cudaEventSynchronize:
    case FLYT_FN_cudaEventQuery:
    case FLYT_FN_cuStreamSynchronize:
    case FLYT_FN_cuStreamSynchronize_ptsz:
    case FLYT_FN_cuCtxSynchronize: return FLYT_EV_SYNC;
    case FLYT_FN_cudaEventRecord:
    case FLYT_FN_cudaEventRecord_ptsz: return FLYT_EV_EVENT_RECORD;
    case FLYT_FN_cudaStreamCreate:
    case FLYT_FN_cudaStreamCreateWithFlags:
    case FLYT_FN_cudaStreamCreateWithPriority:
    case FLYT_FN_cuStreamCreate:
    case FLYT_FN_cuStreamCreateWithPriority: return FLYT_EV_STREAM_CREATE;
    case FLYT_FN_cudaStreamDestroy:
    case FLYT_FN_cuStreamDestroy_v2: return FLYT_EV_STREAM_DESTROY;
    case FLYT_FN_cudaSetDevice: return FLYT_EV_SET_DEVICE;
    case FLYT_FN___cudaRegisterFunction: return FLYT_EV_REGISTER_FUNCTION;
    case FLYT_FN___cudaGetKernel:
    case FLYT_FN_cudaGetKernel: return FLYT_EV_GET_KERNEL;
    case FLYT_FN_cuModuleGetFunction: return FLYT_EV_MODULE_FUNCTION;
    case FLYT_FN_setenv:
    case FLYT_FN_putenv: return FLYT_EV_SETENV;
    default: return 0;
  }
}

#define FLYT_F_TRUNCATED 1u  /* a name/path/env text was cut to fit */
#define FLYT_F_PER_THREAD 2u /* a _ptsz/_ptds entry point: stream 0 means the per-thread stream */
#define FLYT_F_AT_ENTRY 4u   /* written at the call's entry: rc is 0, not the call's result */

/* The attach cookie's fields (see enum flyt_trace_func). */
#define FLYT_COOKIE_FUNC(c) ((c) & 0xffffu)
#define FLYT_COOKIE_LIBRARY(c) (((c) >> 16) & 0xffu)
#define FLYT_COOKIE_CODE_BEFORE(c) ((((c) >> 24) & 0xfffffull) << 4)
#define FLYT_COOKIE_CODE_AFTER(c) ((((c) >> 44) & 0xfffffull) << 4)
#define FLYT_COOKIE_CODE_MAX_UNITS 0xfffffull

struct flyt_trace_launch {
  struct flyt_trace_header h;
  flyt_u64 function; /* stub address, kernel handle (__cudaLaunchKernel), CUfunction, graph exec */
  flyt_u64 stream;
  flyt_u32 grid[3];
  flyt_u32 block[3];
  flyt_u32 shared_bytes;
  flyt_u32 reserved;
};

struct flyt_trace_alloc {
  struct flyt_trace_header h;
  flyt_u64 ptr; /* what the call wrote to its out-pointer (0 when it failed) */
  flyt_u64 bytes; /* requested; cudaMallocPitch: pitch * height */
  flyt_u64 stream; /* the async ones */
  flyt_u32 memory; /* enum flyt_trace_memory */
  flyt_u32 reserved;
};

struct flyt_trace_free {
  struct flyt_trace_header h;
  flyt_u64 ptr;
  flyt_u64 stream;
  flyt_u32 memory; /* FLYT_MEM_HOST_PINNED for cudaFreeHost, FLYT_MEM_DEVICE otherwise */
  flyt_u32 reserved;
};

struct flyt_trace_copy {
  struct flyt_trace_header h;
  flyt_u64 dst;
  flyt_u64 src; /* memset: the value */
  flyt_u64 bytes;
  flyt_u64 stream;
  flyt_u32 copy_kind; /* enum flyt_trace_copy_kind (memset: FLYT_COPY_DEFAULT) */
  flyt_u32 async;     /* 1 for the *Async entry points */
};

struct flyt_trace_sync {
  struct flyt_trace_header h;
  flyt_u64 object; /* the stream (stream syncs), the event (event sync/query); 0 otherwise */
};

struct flyt_trace_event_record {
  struct flyt_trace_header h;
  flyt_u64 event;
  flyt_u64 stream;
};

struct flyt_trace_stream {
  struct flyt_trace_header h;
  flyt_u64 stream;
  flyt_u32 flags; /* cudaStreamNonBlocking = 1 */
  flyt_s32 priority;
};

struct flyt_trace_set_device {
  struct flyt_trace_header h;
  flyt_s32 device;
  flyt_u32 reserved;
};

struct flyt_trace_get_kernel {
  struct flyt_trace_header h;
  flyt_u64 handle; /* what __cudaGetKernel wrote */
  flyt_u64 stub;   /* the host stub it was asked about */
};

struct flyt_trace_name {
  struct flyt_trace_header h;
  flyt_u64 address; /* REGISTER_FUNCTION: the stub; MODULE_FUNCTION: the CUfunction */
  char name[FLYT_TRACE_NAME_BYTES]; /* NUL-terminated, mangled as the program passed it */
};

struct flyt_trace_env {
  struct flyt_trace_header h;
  char text[FLYT_TRACE_ENV_BYTES]; /* "CUDA_VISIBLE_DEVICES=0,1"; putenv's string as given */
};

struct flyt_trace_path {
  struct flyt_trace_header h;
  char path[FLYT_TRACE_NAME_BYTES]; /* as the process named it (may be relative to its cwd) */
};

/* The environment a process was started with (the bytes /proc/<pid>/environ shows: "NAME=value"
 * entries, each ended by a NUL), copied from its memory while it opens a CUDA library: user space
 * reads /proc only when it drains the record, and a short program can be gone by then (a zombie's
 * environ reads empty). Written before the LIBRARY_OPEN record of the same open. Only the first
 * `bytes` of `text` are the environment's; FLYT_F_TRUNCATED: it was longer, or a page of it could
 * not be read, so the last entry may be cut. The ring record ends with the environment: it is
 * offsetof(text) + bytes long. */
struct flyt_trace_environ {
  struct flyt_trace_header h;
  flyt_u32 bytes;
  flyt_u32 reserved;
  char text[FLYT_TRACE_ENVIRON_BYTES];
};

#endif /* FLYT_TRACE_BPF_EVENTS_H_ */
