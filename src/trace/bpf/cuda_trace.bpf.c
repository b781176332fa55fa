/* The BPF half of flyt's CUDA tracer: one generic uprobe entry program and one generic uretprobe
 * return program for every probed CUDA call (the attach cookie = func | library_class << 16 | ...,
 * events.h, says which), an entry-only program for kernel launches, libc's setenv/putenv, and the
 * control tracepoints (exec, successful opens of libcuda* with the opener's environment, exits).
 * Records go to one ring buffer in the layouts of events.h. Built by clang (-target bpf) and
 * embedded in the tracer through a bpftool skeleton (cuda_trace.skel.h).
 *
 * Cost rules: data records are submitted without a wakeup (the drain thread polls on a timer);
 * only crossing the high-water mark, and the rare control records, wake it. A reservation that
 * fails (the ring is full) is counted in the per-CPU `lost` array, never retried. */
#include "trace/bpf/vmlinux_min.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "trace/bpf/events.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space before load: ring_buffer_bytes × high_water_percent / 100. */
const volatile __u64 high_water_bytes = 8 << 20;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 24); /* user space sets TraceOptions.ring_buffer_bytes */
} events SEC(".maps");

/* Reservations that failed, per CPU (user space sums them: TracerHealth.events_lost). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} lost SEC(".maps");

/* A thread's outermost probed call in flight (entry + return probes): its arguments and entry
 * time. */
struct inflight {
  __u64 regs[6];  /* rdi, rsi, rdx, rcx, r8, r9 */
  __u64 stack[3]; /* the first three stack arguments (launches only) */
  __u64 entry_ns; /* 0 where the record needs no entry time (it then takes its return time) */
  __u64 sp;       /* the stack pointer at entry */
  __u32 cookie;   /* func | library_class << 16 */
  __u32 depth;    /* probed calls of this thread in progress, this one included; 0: none */
};

/* Per thread, in task storage (freed with the thread; no table to fill up, no lookup by key). */
struct thread_state {
  struct inflight call;
  /* The last kernel launch counted at entry: where its frame was and where it returns to. The
   * runtime's launch entry point it jumps to (NVIDIA's __cudaLaunchKernel is `jmp
   * cudaLaunchKernel`) is entered at the same stack pointer with the same return address. */
  __u64 launch_sp;
  __u64 launch_ra;
  /* The code of the CUDA runtime library, and of the driver, this thread last called into: a
   * call returning into one of them is that library's own, made on the program's behalf inside
   * a call already recorded. (A runtime linked into the executable has no such range: its
   * launches keep their return probe, and the depth count tells nesting.) */
  __u64 code_begin;
  __u64 code_end;
  __u64 driver_begin;
  __u64 driver_end;
  __u32 launch_func;
  __u8 tracked;     /* this thread's process is in `tracked` */
  __u8 silent;      /* the call in flight is the runtime's own driver call: no record */
  __u8 pad[2];
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct thread_state);
} threads SEC(".maps");

/* Processes (tgid) that produced a record: their leader's exit is reported. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u8);
} tracked SEC(".maps");

/* A libcuda* path a thread is opening (sys_enter_openat), kept until the open returns: only an
 * open that succeeded is reported (the loader tries many folders that fail first). */
struct pending_open {
  char text[FLYT_TRACE_NAME_BYTES];
  __s64 bytes; /* what bpf_probe_read_user_str returned: > FLYT_TRACE_NAME_BYTES - 1 = cut */
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct pending_open);
} scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u64); /* pid_tgid */
  __type(value, struct pending_open);
} opening SEC(".maps");

/* An ENVIRON record being built, one per CPU (user space sets max_entries to the number of
 * possible CPUs; a per-CPU array cannot hold values this large). */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct flyt_trace_environ);
} environ_scratch SEC(".maps");

static __always_inline void count_lost(void) {
  __u32 zero = 0;
  __u64* n = bpf_map_lookup_elem(&lost, &zero);
  if (n) *n += 1;
}

static __always_inline void* reserve(__u64 bytes) {
  void* rec = bpf_ringbuf_reserve(&events, bytes, 0);
  if (!rec) count_lost();
  return rec;
}

/* Data records: no wakeup, unless this record made the ring's fill cross the high-water mark. */
static __always_inline void submit_data(void* rec, __u64 bytes) {
  __u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
  __u64 flags = BPF_RB_NO_WAKEUP;
  /* avail already counts this record (8 bytes of ring header each). */
  if (avail >= high_water_bytes && avail < high_water_bytes + bytes + 8 + 64)
    flags = BPF_RB_FORCE_WAKEUP;
  bpf_ringbuf_submit(rec, flags);
}

/* entry_ns 0: the record's own time (a call whose entry time is not kept). */
static __always_inline void fill_header(struct flyt_trace_header* h, __u16 kind, __u16 func,
                                        __u16 library, __s32 rc, __u64 entry_ns) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  h->ts_ns = bpf_ktime_get_ns();
  h->cgroup_id = bpf_get_current_cgroup_id();
  h->entry_ns = entry_ns != 0 ? entry_ns : h->ts_ns;
  h->pid = pid_tgid >> 32;
  h->tid = (__u32)pid_tgid;
  h->kind = kind;
  h->func = func;
  h->library = library;
  h->flags = 0;
  h->rc = rc;
  h->reserved = 0;
}

/* The process's exit will be reported: once per thread, not per record. */
static __always_inline void mark_tracked(struct thread_state* st) {
  if (st->tracked) return;
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  __u8 one = 1;
  if (bpf_map_lookup_elem(&tracked, &tgid) ||
      bpf_map_update_elem(&tracked, &tgid, &one, BPF_ANY) == 0)
    st->tracked = 1;
}

static __always_inline struct thread_state* thread_state(int create) {
  return bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0,
                              create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

static __always_inline __u64 read_u64(__u64 address) {
  __u64 v = 0;
  if (address) bpf_probe_read_user(&v, sizeof(v), (const void*)address);
  return v;
}

static __always_inline int is_per_thread(__u32 func) {
  switch (func) {
    case FLYT_FN_cudaLaunchKernel_ptsz:
    case FLYT_FN___cudaLaunchKernel_ptsz:
    case FLYT_FN_cudaLaunchKernelExC_ptsz:
    case FLYT_FN_cudaLaunchCooperativeKernel_ptsz:
    case FLYT_FN_cudaGraphLaunch_ptsz:
    case FLYT_FN_cuLaunchKernel_ptsz:
    case FLYT_FN_cuLaunchKernelEx_ptsz:
    case FLYT_FN_cuGraphLaunch_ptsz:
    case FLYT_FN_cudaMallocAsync_ptsz:
    case FLYT_FN_cudaFreeAsync_ptsz:
    case FLYT_FN_cudaMallocFromPoolAsync_ptsz:
    case FLYT_FN_cudaMemcpy_ptds:
    case FLYT_FN_cudaMemcpyAsync_ptsz:
    case FLYT_FN_cudaMemset_ptds:
    case FLYT_FN_cudaMemsetAsync_ptsz:
    case FLYT_FN_cudaStreamSynchronize_ptsz:
    case FLYT_FN_cudaEventRecord_ptsz:
    case FLYT_FN_cuStreamSynchronize_ptsz:
      return 1;
  }
  return 0;
}

static __always_inline int is_kernel_launch_with_stack_args(__u32 func) {
  switch (func) {
    case FLYT_FN_cudaLaunchKernel:
    case FLYT_FN_cudaLaunchKernel_ptsz:
    case FLYT_FN___cudaLaunchKernel:
    case FLYT_FN___cudaLaunchKernel_ptsz:
    case FLYT_FN_cudaLaunchCooperativeKernel:
    case FLYT_FN_cudaLaunchCooperativeKernel_ptsz:
    case FLYT_FN_cuLaunchKernel:
    case FLYT_FN_cuLaunchKernel_ptsz:
      return 1;
  }
  return 0;
}

/* Copies, memsets, syncs and launches keep their entry time (a blocking copy's span, a sync's
 * wait, a launch's enqueue); the other calls are stamped once, at return. */
static __always_inline int keeps_entry_time(__u32 func) {
  __u16 kind = flyt_trace_kind_of(func);
  return kind == FLYT_EV_LAUNCH || kind == FLYT_EV_COPY || kind == FLYT_EV_MEMSET ||
         kind == FLYT_EV_SYNC;
}

/* The return address of a call entered at `sp`, given what lies at [sp]: a uretprobe on a frame —
 * another tracer's, or this one's with launch results — replaces the return address there with
 * the kernel's trampoline (after a tail jump the callee finds it so), and the kernel keeps the
 * real one in the task's return instance for that frame. Direct reads through the task's BTF
 * pointer: no helper call. */
static __always_inline __u64 return_address(__u64 sp, __u64 at_sp) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct uprobe_task* ut = task->utask;
  if (!ut) return at_sp;
  struct return_instance* ri = ut->return_instances;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    if (!ri) break;
    if (ri->stack == sp) return ri->orig_ret_vaddr;
    ri = ri->next;
  }
  return at_sp;
}

/* Where the code of the library being entered lies (the cookie carries the distances from the
 * function to the ends of its code section; ±16 bytes of slack cover the 16-byte units and the
 * breakpoint's byte). A runtime linked into the executable shares its range with the program:
 * not noted (its calls keep their return probes). */
static __always_inline void note_code(struct thread_state* st, struct pt_regs* ctx, __u64 cookie,
                                      __u32 lib) {
  __u64 ip = PT_REGS_IP(ctx);
  __u64 begin = ip - FLYT_COOKIE_CODE_BEFORE(cookie) - 16;
  __u64 end = ip + FLYT_COOKIE_CODE_AFTER(cookie) + 16;
  if (lib == FLYT_LIB_DRIVER) {
    st->driver_begin = begin;
    st->driver_end = end;
  } else if (lib != FLYT_LIB_STATIC_RUNTIME) {
    st->code_begin = begin;
    st->code_end = end;
  }
}

/* Whether a call returning to `ra` is a CUDA library's own, made on the program's behalf inside a
 * call already recorded: it returns into the runtime's code, or (a driver call) the driver's. */
static __always_inline int made_by_library(struct thread_state* st, __u64 ra, __u32 lib) {
  if (ra >= st->code_begin && ra < st->code_end) return 1;
  return lib == FLYT_LIB_DRIVER && ra >= st->driver_begin && ra < st->driver_end;
}

/* The runtime's launch entry points that jump to another (same frame, same return address): the
 * one counted, then the one it jumps to. Only these pairs: two launches a program makes from one
 * call instruction through a pointer are two launches. */
static __always_inline int is_launch_tail_jump(__u32 from, __u32 to) {
  return (from == FLYT_FN___cudaLaunchKernel && to == FLYT_FN_cudaLaunchKernel) ||
         (from == FLYT_FN___cudaLaunchKernel_ptsz &&
          (to == FLYT_FN_cudaLaunchKernel_ptsz || to == FLYT_FN_cudaLaunchKernel)) ||
         (from == FLYT_FN_cudaLaunchKernel_ptsz && to == FLYT_FN_cudaLaunchKernel);
}

/* A probed call's entry (entry + return probes): its arguments are kept until its return. */
SEC("uprobe")
int BPF_KPROBE(cuda_entry) {
  struct thread_state* st = thread_state(1);
  if (!st) return 0;
  __u64 sp = PT_REGS_SP(ctx);
  if (st->call.depth) {
    /* A probed call inside another one (runtime -> driver, or runtime -> runtime) — unless the
     * one in flight left without its return probe firing (its frame is gone: this call's stack
     * pointer is above it), which must not silence the thread for good. */
    if (sp <= st->call.sp) {
      st->call.depth += 1;
      return 0;
    }
  }
  __u64 cookie = bpf_get_attach_cookie(ctx);
  __u32 func = FLYT_COOKIE_FUNC(cookie);
  __u32 lib = FLYT_COOKIE_LIBRARY(cookie);
  st->call.cookie = (__u32)(cookie & 0xffffff);
  st->call.depth = 1;
  st->call.sp = sp;
  st->silent = 0;
  if (lib == FLYT_LIB_DRIVER) {
    if (st->code_end != 0 && made_by_library(st, return_address(sp, read_u64(sp)), 0)) {
      st->silent = 1;
      return 0;
    }
  } else {
    note_code(st, ctx, cookie, lib);
  }
  st->call.regs[0] = PT_REGS_PARM1(ctx);
  st->call.regs[1] = PT_REGS_PARM2(ctx);
  st->call.regs[2] = PT_REGS_PARM3(ctx);
  st->call.regs[3] = PT_REGS_PARM4(ctx);
  st->call.regs[4] = PT_REGS_PARM5(ctx);
  st->call.regs[5] = ctx->r9; /* bpf_tracing.h of libbpf 1.1 has no PT_REGS_PARM6 */
  /* [sp] is the return address; the stack arguments follow it. */
  if (is_kernel_launch_with_stack_args(func))
    bpf_probe_read_user(st->call.stack, sizeof(st->call.stack), (const void*)(sp + 8));
  st->call.entry_ns = keeps_entry_time(func) ? bpf_ktime_get_ns() : 0;
  return 0;
}

static __always_inline void emit_launch(const __u64* regs, const __u64* stack, __u16 func,
                                        __u16 lib, __s32 rc, __u64 entry_ns, __u16 flags) {
  struct flyt_trace_launch* r = reserve(sizeof(*r));
  if (!r) return;
  fill_header(&r->h, FLYT_EV_LAUNCH, func, lib, rc, entry_ns);
  r->h.flags = flags;
  r->reserved = 0;
  r->function = 0;
  r->stream = 0;
  r->shared_bytes = 0;
  r->grid[0] = r->grid[1] = r->grid[2] = 0;
  r->block[0] = r->block[1] = r->block[2] = 0;
  switch (func) {
    case FLYT_FN_cudaLaunchKernel:
    case FLYT_FN_cudaLaunchKernel_ptsz:
    case FLYT_FN___cudaLaunchKernel:
    case FLYT_FN___cudaLaunchKernel_ptsz:
    case FLYT_FN_cudaLaunchCooperativeKernel:
    case FLYT_FN_cudaLaunchCooperativeKernel_ptsz:
      /* (func, dim3 grid = {x|y<<32, z}, dim3 block = {x|y<<32, z}, args; shmem, stream) */
      r->function = regs[0];
      r->grid[0] = (__u32)regs[1];
      r->grid[1] = (__u32)(regs[1] >> 32);
      r->grid[2] = (__u32)regs[2];
      r->block[0] = (__u32)regs[3];
      r->block[1] = (__u32)(regs[3] >> 32);
      r->block[2] = (__u32)regs[4];
      r->shared_bytes = (__u32)stack[0];
      r->stream = stack[1];
      break;
    case FLYT_FN_cudaLaunchKernelExC:
    case FLYT_FN_cudaLaunchKernelExC_ptsz:
    case FLYT_FN_cuLaunchKernelEx:
    case FLYT_FN_cuLaunchKernelEx_ptsz: {
      /* (config*, func). Both configs open alike: grid and block (6 x u32), the dynamic shared
       * memory at 24 (cudaLaunchConfig_t: size_t; CUlaunchConfig: u32 + padding), the stream at
       * 32. One read of the first 40 bytes. */
      __u32 c[10] = {};
      bpf_probe_read_user(c, sizeof(c), (const void*)regs[0]);
      r->function = regs[1];
      r->grid[0] = c[0];
      r->grid[1] = c[1];
      r->grid[2] = c[2];
      r->block[0] = c[3];
      r->block[1] = c[4];
      r->block[2] = c[5];
      r->shared_bytes = c[6];
      r->stream = (__u64)c[8] | (__u64)c[9] << 32;
      break;
    }
    case FLYT_FN_cuLaunchKernel:
    case FLYT_FN_cuLaunchKernel_ptsz:
      /* (f, gx, gy, gz, bx, by; bz, smem, stream, params, extra) */
      r->function = regs[0];
      r->grid[0] = (__u32)regs[1];
      r->grid[1] = (__u32)regs[2];
      r->grid[2] = (__u32)regs[3];
      r->block[0] = (__u32)regs[4];
      r->block[1] = (__u32)regs[5];
      r->block[2] = (__u32)stack[0];
      r->shared_bytes = (__u32)stack[1];
      r->stream = stack[2];
      break;
    default: /* cudaGraphLaunch, cuGraphLaunch: (exec, stream) */
      r->function = regs[0];
      r->stream = regs[1];
      break;
  }
  if (is_per_thread(func)) r->h.flags |= FLYT_F_PER_THREAD;
  submit_data(r, sizeof(*r));
}

static __always_inline void emit_alloc(struct inflight* f, __u16 func, __u16 lib, __s32 rc) {
  struct flyt_trace_alloc* r = reserve(sizeof(*r));
  if (!r) return;
  fill_header(&r->h, FLYT_EV_ALLOC, func, lib, rc, f->entry_ns);
  r->ptr = rc == 0 ? read_u64(f->regs[0]) : 0; /* a failed call's out-pointer is not read */
  r->bytes = f->regs[1];
  r->stream = 0;
  r->memory = FLYT_MEM_DEVICE;
  r->reserved = 0;
  switch (func) {
    case FLYT_FN_cudaMallocAsync:
    case FLYT_FN_cudaMallocAsync_ptsz:
      r->stream = f->regs[2];
      break;
    case FLYT_FN_cudaMallocFromPoolAsync:
    case FLYT_FN_cudaMallocFromPoolAsync_ptsz:
      r->stream = f->regs[3];
      break;
    case FLYT_FN_cudaMallocManaged:
      r->memory = FLYT_MEM_MANAGED;
      break;
    case FLYT_FN_cudaMallocPitch: /* (ptr*, size_t* pitch, width, height) */
      r->bytes = read_u64(f->regs[1]) * f->regs[3];
      break;
    case FLYT_FN_cudaMallocHost:
    case FLYT_FN_cudaHostAlloc:
      r->memory = FLYT_MEM_HOST_PINNED;
      break;
  }
  if (is_per_thread(func)) r->h.flags |= FLYT_F_PER_THREAD;
  submit_data(r, sizeof(*r));
}

static __always_inline void emit_free(struct inflight* f, __u16 func, __u16 lib, __s32 rc) {
  struct flyt_trace_free* r = reserve(sizeof(*r));
  if (!r) return;
  fill_header(&r->h, FLYT_EV_FREE, func, lib, rc, f->entry_ns);
  r->ptr = f->regs[0];
  r->stream = 0;
  r->memory = FLYT_MEM_DEVICE;
  r->reserved = 0;
  if (func == FLYT_FN_cudaFreeAsync || func == FLYT_FN_cudaFreeAsync_ptsz) r->stream = f->regs[1];
  if (func == FLYT_FN_cudaFreeHost) r->memory = FLYT_MEM_HOST_PINNED;
  if (is_per_thread(func)) r->h.flags |= FLYT_F_PER_THREAD;
  submit_data(r, sizeof(*r));
}

static __always_inline void emit_copy(struct inflight* f, __u16 func, __u16 lib, __s32 rc,
                                      __u16 kind) {
  struct flyt_trace_copy* r = reserve(sizeof(*r));
  if (!r) return;
  fill_header(&r->h, kind, func, lib, rc, f->entry_ns);
  r->dst = f->regs[0];
  r->src = f->regs[1];
  r->bytes = f->regs[2];
  r->stream = 0;
  r->async = 0;
  if (kind == FLYT_EV_COPY) {
    /* (dst, src, count, kind[, stream]) */
    r->copy_kind = (__u32)f->regs[3];
    if (func == FLYT_FN_cudaMemcpyAsync || func == FLYT_FN_cudaMemcpyAsync_ptsz) {
      r->stream = f->regs[4];
      r->async = 1;
    }
  } else {
    /* (ptr, int value, count[, stream]) */
    r->src = (__u32)f->regs[1];
    r->copy_kind = FLYT_COPY_DEFAULT;
    if (func == FLYT_FN_cudaMemsetAsync || func == FLYT_FN_cudaMemsetAsync_ptsz) {
      r->stream = f->regs[3];
      r->async = 1;
    }
  }
  if (is_per_thread(func)) r->h.flags |= FLYT_F_PER_THREAD;
  submit_data(r, sizeof(*r));
}

static __always_inline void emit_u64_pair(struct inflight* f, __u16 func, __u16 lib, __s32 rc,
                                          __u16 kind, __u64 a, __u64 b) {
  /* sync (object), event record (event, stream), get kernel (handle, stub): same shape. */
  if (kind == FLYT_EV_SYNC) {
    struct flyt_trace_sync* r = reserve(sizeof(*r));
    if (!r) return;
    fill_header(&r->h, kind, func, lib, rc, f->entry_ns);
    r->object = a;
    if (is_per_thread(func)) r->h.flags |= FLYT_F_PER_THREAD;
    submit_data(r, sizeof(*r));
    return;
  }
  struct flyt_trace_event_record* r = reserve(sizeof(*r));
  if (!r) return;
  fill_header(&r->h, kind, func, lib, rc, f->entry_ns);
  r->event = a;
  r->stream = b;
  if (is_per_thread(func)) r->h.flags |= FLYT_F_PER_THREAD;
  submit_data(r, sizeof(*r));
}

static __always_inline void emit_stream(struct inflight* f, __u16 func, __u16 lib, __s32 rc) {
  struct flyt_trace_stream* r = reserve(sizeof(*r));
  if (!r) return;
  if (func == FLYT_FN_cudaStreamDestroy || func == FLYT_FN_cuStreamDestroy_v2) {
    fill_header(&r->h, FLYT_EV_STREAM_DESTROY, func, lib, rc, f->entry_ns);
    r->stream = f->regs[0];
    r->flags = 0;
    r->priority = 0;
  } else {
    /* (stream*[, unsigned flags[, int priority]]): the runtime's and the driver's alike;
     * cudaStreamNonBlocking and CU_STREAM_NON_BLOCKING are both 1. */
    fill_header(&r->h, FLYT_EV_STREAM_CREATE, func, lib, rc, f->entry_ns);
    r->stream = rc == 0 ? read_u64(f->regs[0]) : 0;
    r->flags = func == FLYT_FN_cudaStreamCreate ? 0 : (__u32)f->regs[1];
    r->priority = (func == FLYT_FN_cudaStreamCreateWithPriority ||
                   func == FLYT_FN_cuStreamCreateWithPriority)
                      ? (__s32)f->regs[2]
                      : 0;
  }
  submit_data(r, sizeof(*r));
}

static __always_inline void emit_name(struct inflight* f, __u16 func, __u16 lib, __s32 rc,
                                      __u16 kind, __u64 address, __u64 name) {
  struct flyt_trace_name* r = reserve(sizeof(*r));
  if (!r) return;
  fill_header(&r->h, kind, func, lib, rc, f->entry_ns);
  r->address = address;
  r->name[0] = 0;
  long n = bpf_probe_read_user_str(r->name, sizeof(r->name), (const void*)name);
  if (n >= (long)sizeof(r->name)) r->h.flags |= FLYT_F_TRUNCATED;
  if (n < 0) r->name[0] = 0;
  submit_data(r, sizeof(*r));
}

/* A kernel launch's entry, where launches are recorded at entry (no return probe: the launch
 * costs one trap). Nesting is told apart without a return: the runtime's tail jump from the
 * launch just counted (is_launch_tail_jump), a launch a CUDA library makes itself — the runtime
 * of the driver or of another of its entry points, the driver of another of its own
 * (made_by_library) — and a launch inside a probed call in flight (a runtime call that
 * launches). A runtime linked into the executable is not attached here (attacher.cc). */
SEC("uprobe")
int BPF_KPROBE(cuda_launch) {
  struct thread_state* st = thread_state(1);
  if (!st) return 0;
  __u64 sp = PT_REGS_SP(ctx);
  if (st->call.depth) {
    if (sp <= st->call.sp) return 0;
    st->call.depth = 0; /* the call in flight left without its return probe firing */
  }
  __u64 cookie = bpf_get_attach_cookie(ctx);
  __u32 func = FLYT_COOKIE_FUNC(cookie);
  __u32 lib = FLYT_COOKIE_LIBRARY(cookie);
  /* [sp]: the return address, then the first three stack arguments — one read. */
  __u64 w[4] = {};
  bpf_probe_read_user(w, sizeof(w), (const void*)sp);
  w[0] = return_address(sp, w[0]);
  if (sp == st->launch_sp && w[0] == st->launch_ra && is_launch_tail_jump(st->launch_func, func))
    return 0;
  if (made_by_library(st, w[0], lib)) return 0;
  note_code(st, ctx, cookie, lib);
  st->launch_sp = sp;
  st->launch_ra = w[0];
  st->launch_func = func;
  mark_tracked(st);
  __u64 regs[6] = {PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx),
                   PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), ctx->r9};
  emit_launch(regs, &w[1], func, lib, 0, 0, FLYT_F_AT_ENTRY);
  return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(cuda_return) {
  struct thread_state* st = thread_state(0);
  if (!st || st->call.depth == 0) return 0;
  struct inflight* f = &st->call;
  if (f->depth > 1) {
    f->depth -= 1;
    return 0;
  }
  __u32 cookie = (__u32)(bpf_get_attach_cookie(ctx) & 0xffffff);
  /* A return without its entry (its uprobe failed to attach) must not close the outer call. */
  if (f->cookie != cookie) return 0;
  f->depth = 0;
  if (st->silent) return 0;

  __u16 func = FLYT_COOKIE_FUNC(cookie);
  __u16 lib = FLYT_COOKIE_LIBRARY(cookie);
  __s32 rc = (__s32)PT_REGS_RC(ctx);
  mark_tracked(st);

  switch (flyt_trace_kind_of(func)) {
    case FLYT_EV_LAUNCH:
      emit_launch(f->regs, f->stack, func, lib, rc, f->entry_ns, 0);
      break;
    case FLYT_EV_ALLOC:
      emit_alloc(f, func, lib, rc);
      break;
    case FLYT_EV_FREE:
      emit_free(f, func, lib, rc);
      break;
    case FLYT_EV_COPY:
      emit_copy(f, func, lib, rc, FLYT_EV_COPY);
      break;
    case FLYT_EV_MEMSET:
      emit_copy(f, func, lib, rc, FLYT_EV_MEMSET);
      break;
    case FLYT_EV_SYNC: {
      /* The stream or event synchronised; a device or context sync names none. */
      __u64 object = (func == FLYT_FN_cudaDeviceSynchronize || func == FLYT_FN_cuCtxSynchronize)
                         ? 0
                         : f->regs[0];
      emit_u64_pair(f, func, lib, rc, FLYT_EV_SYNC, object, 0);
      break;
    }
    case FLYT_EV_EVENT_RECORD:
      emit_u64_pair(f, func, lib, rc, FLYT_EV_EVENT_RECORD, f->regs[0], f->regs[1]);
      break;
    case FLYT_EV_GET_KERNEL:
      /* (cudaKernel_t* out, const void* stub) */
      emit_u64_pair(f, func, lib, rc, FLYT_EV_GET_KERNEL, rc == 0 ? read_u64(f->regs[0]) : 0,
                    f->regs[1]);
      break;
    case FLYT_EV_STREAM_CREATE:
    case FLYT_EV_STREAM_DESTROY:
      emit_stream(f, func, lib, rc);
      break;
    case FLYT_EV_SET_DEVICE: {
      struct flyt_trace_set_device* r = reserve(sizeof(*r));
      if (!r) break;
      fill_header(&r->h, FLYT_EV_SET_DEVICE, func, lib, rc, f->entry_ns);
      r->device = (__s32)f->regs[0];
      r->reserved = 0;
      submit_data(r, sizeof(*r));
      break;
    }
    case FLYT_EV_REGISTER_FUNCTION:
      /* Where no sleepable program could be loaded: the name as far as it is in memory. */
      emit_name(f, func, lib, 0, FLYT_EV_REGISTER_FUNCTION, f->regs[1], f->regs[2]);
      break;
    case FLYT_EV_MODULE_FUNCTION:
      /* (CUfunction* out, CUmodule, const char* name) */
      emit_name(f, func, lib, rc, FLYT_EV_MODULE_FUNCTION, rc == 0 ? read_u64(f->regs[0]) : 0,
                f->regs[2]);
      break;
  }
  return 0;
}

/* __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun, ...), at entry,
 * in a sleepable program: the runtime keeps the name's pointer without reading it, and at load
 * time the page of the program's .rodata that holds it is often not in memory yet, where a
 * plain read fails. A sleepable program may fault it in (bpf_copy_from_user), so the name is
 * read whole; the call returns nothing, so nothing is lost by not waiting for its return. */
SEC("uprobe.s")
int BPF_KPROBE(cuda_register, void** handle, const char* host_fun, const char* device_fun) {
  char touch;
  /* The name's first page, and the next one when 256 bytes from its start reach there. */
  bpf_copy_from_user(&touch, 1, device_fun);
  if ((((__u64)device_fun) & 4095) > 4096 - FLYT_TRACE_NAME_BYTES)
    bpf_copy_from_user(&touch, 1, device_fun + FLYT_TRACE_NAME_BYTES - 1);
  __u32 lib = FLYT_COOKIE_LIBRARY(bpf_get_attach_cookie(ctx));
  struct flyt_trace_name* r = reserve(sizeof(*r));
  if (!r) return 0;
  fill_header(&r->h, FLYT_EV_REGISTER_FUNCTION, FLYT_FN___cudaRegisterFunction, lib, 0, 0);
  r->address = (__u64)host_fun;
  r->name[0] = 0;
  long n = bpf_probe_read_user_str(r->name, sizeof(r->name), device_fun);
  if (n >= (long)sizeof(r->name)) r->h.flags |= FLYT_F_TRUNCATED;
  if (n < 0) r->name[0] = 0;
  struct thread_state* st = thread_state(1);
  if (st) mark_tracked(st);
  submit_data(r, sizeof(*r));
  return 0;
}

/* setenv(name, value, overwrite) / putenv("NAME=value") on libc: only CUDA_VISIBLE_DEVICES and
 * CUDA_DEVICE_ORDER are reported. */
static __always_inline int watched_name(const char* s) {
  /* "CUDA_" then "VISIBLE_DEVICES" or "DEVICE_ORDER". */
  if (s[0] != 'C' || s[1] != 'U' || s[2] != 'D' || s[3] != 'A' || s[4] != '_') return 0;
  if (s[5] == 'V' && s[6] == 'I' && s[7] == 'S' && s[8] == 'I' && s[9] == 'B' && s[10] == 'L' &&
      s[11] == 'E' && s[12] == '_' && s[13] == 'D' && s[14] == 'E' && s[15] == 'V' &&
      s[16] == 'I' && s[17] == 'C' && s[18] == 'E' && s[19] == 'S')
    return 1;
  if (s[5] == 'D' && s[6] == 'E' && s[7] == 'V' && s[8] == 'I' && s[9] == 'C' && s[10] == 'E' &&
      s[11] == '_' && s[12] == 'O' && s[13] == 'R' && s[14] == 'D' && s[15] == 'E' && s[16] == 'R')
    return 1;
  return 0;
}

SEC("uprobe")
int BPF_KPROBE(env_entry, const char* name, const char* value) {
  char head[24] = {};
  if (bpf_probe_read_user_str(head, sizeof(head), name) < 18) return 0;
  if (!watched_name(head)) return 0;
  __u32 func = (__u32)bpf_get_attach_cookie(ctx) & 0xffff;
  struct flyt_trace_env* r = reserve(sizeof(*r));
  if (!r) return 0;
  fill_header(&r->h, FLYT_EV_SETENV, func, FLYT_LIB_LIBC, 0, 0);
  r->h.entry_ns = r->h.ts_ns;
  if (func == FLYT_FN_putenv) {
    long n = bpf_probe_read_user_str(r->text, sizeof(r->text), name);
    if (n >= (long)sizeof(r->text)) r->h.flags |= FLYT_F_TRUNCATED;
  } else {
    long n = bpf_probe_read_user_str(r->text, 64, name); /* with its NUL */
    if (n <= 0 || n >= 64) {
      r->h.flags |= FLYT_F_TRUNCATED;
      n = 64;
    }
    __u32 at = (__u32)(n - 1) & 63;
    r->text[at] = '=';
    long m = bpf_probe_read_user_str(&r->text[at + 1], 64, value);
    if (m >= 64) r->h.flags |= FLYT_F_TRUNCATED;
    if (m < 0) r->text[at + 1] = 0;
  }
  struct thread_state* st = thread_state(1);
  if (st) mark_tracked(st);
  bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
  return 0;
}

/* exec and exit come from BTF-typed raw tracepoints (tp_btf): no tracefs mount needed. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct* task, pid_t old_pid, struct linux_binprm* bprm) {
  /* A new program: what the thread knew of the old one's code and calls no longer holds. */
  bpf_task_storage_delete(&threads, bpf_get_current_task_btf());
  struct flyt_trace_path* r = reserve(sizeof(*r));
  if (!r) return 0;
  fill_header(&r->h, FLYT_EV_EXEC, 0, 0, 0, 0);
  long n = bpf_probe_read_kernel_str(r->path, sizeof(r->path), BPF_CORE_READ(bprm, filename));
  if (n >= (long)sizeof(r->path)) r->h.flags |= FLYT_F_TRUNCATED;
  if (n < 0) r->path[0] = 0;
  bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
  return 0;
}

static __always_inline int on_open(const char* filename) {
  __u32 zero = 0;
  struct pending_open* buf = bpf_map_lookup_elem(&scratch, &zero);
  if (!buf) return 0;
  long n = bpf_probe_read_user_str(buf->text, sizeof(buf->text), filename);
  if (n <= 7) return 0;
  /* A path through /proc (/proc/<pid>/root/..., /proc/self/fd/N) is a tracer examining a file —
   * this one's or another node manager's on the same machine — never a program loading CUDA; two
   * tracers answering each other's opens would never stop. */
  if (buf->text[0] == '/' && buf->text[1] == 'p' && buf->text[2] == 'r' && buf->text[3] == 'o' &&
      buf->text[4] == 'c' && buf->text[5] == '/')
    return 0;
  /* The basename: after the last '/', searched backwards from the end. */
  long base = 0;
  for (int k = 0; k < FLYT_TRACE_NAME_BYTES; k++) {
    long i = n - 2 - k;
    if (i < 0) break;
    if (buf->text[i & (FLYT_TRACE_NAME_BYTES - 1)] == '/') {
      base = i + 1;
      break;
    }
  }
  if (base < 0 || base > FLYT_TRACE_NAME_BYTES - 8) return 0;
  const char* b = &buf->text[base & (FLYT_TRACE_NAME_BYTES - 1)];
  if (b[0] != 'l' || b[1] != 'i' || b[2] != 'b' || b[3] != 'c' || b[4] != 'u' || b[5] != 'd' ||
      b[6] != 'a')
    return 0;
  buf->bytes = n;
  __u64 id = bpf_get_current_pid_tgid();
  bpf_map_update_elem(&opening, &id, buf, BPF_ANY);
  return 0;
}

/* The environment of the process opening a CUDA library, copied from its memory now, while it
 * surely runs (events.h: struct flyt_trace_environ). A page-sized piece at a time: a piece that
 * cannot be read (not in memory) ends the copy, and the record says it was cut. The record is as
 * long as the environment, not the struct. No wakeup: the LIBRARY_OPEN record written next wakes
 * the drain. */
static __always_inline void write_environ(void) {
  struct task_struct* task = (struct task_struct*)bpf_get_current_task();
  __u64 start = BPF_CORE_READ(task, mm, env_start);
  __u64 end = BPF_CORE_READ(task, mm, env_end);
  if (start == 0 || end <= start) return;
  __u64 len = end - start;
  /* Built in this CPU's scratch, then only its used part goes to the ring. */
  __u32 cpu = bpf_get_smp_processor_id();
  struct flyt_trace_environ* r = bpf_map_lookup_elem(&environ_scratch, &cpu);
  if (!r) return;
  fill_header(&r->h, FLYT_EV_ENVIRON, 0, 0, 0, 0);
  __u32 got = 0;
#pragma unroll
  for (int i = 0; i < FLYT_TRACE_ENVIRON_BYTES / FLYT_TRACE_ENVIRON_CHUNK; i++) {
    __u64 at = (__u64)i * FLYT_TRACE_ENVIRON_CHUNK;
    if (at >= len) break;
    __u64 n = len - at;
    if (n > FLYT_TRACE_ENVIRON_CHUNK) n = FLYT_TRACE_ENVIRON_CHUNK;
    if (bpf_probe_read_user(&r->text[at], n, (const void*)(start + at)) != 0) break;
    got = (__u32)(at + n);
  }
  r->bytes = got;
  r->reserved = 0;
  if (got < len) r->h.flags |= FLYT_F_TRUNCATED;
  __u64 size = sizeof(*r) - FLYT_TRACE_ENVIRON_BYTES + got;
  if (size > sizeof(*r)) return;
  if (bpf_ringbuf_output(&events, r, size, BPF_RB_NO_WAKEUP) != 0) count_lost();
}

static __always_inline int on_open_return(long ret) {
  __u64 id = bpf_get_current_pid_tgid();
  struct pending_open* p = bpf_map_lookup_elem(&opening, &id);
  if (!p) return 0;
  if (ret >= 0) {
    write_environ();
    struct flyt_trace_path* r = reserve(sizeof(*r));
    if (r) {
      fill_header(&r->h, FLYT_EV_LIBRARY_OPEN, 0, 0, 0, 0);
      if (p->bytes >= (long)sizeof(r->path)) r->h.flags |= FLYT_F_TRUNCATED;
      bpf_probe_read_kernel(r->path, sizeof(r->path), p->text);
      r->path[FLYT_TRACE_NAME_BYTES - 1] = 0;
      bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
    }
  }
  bpf_map_delete_elem(&opening, &id);
  return 0;
}

/* openat/openat2 (the dynamic loader's and dlopen's opens): the path at entry, the record at a
 * successful return. Syscall tracepoints need tracefs mounted; fentry would not, but is refused
 * on some kernels (EPERM without ftrace direct calls). */
SEC("tracepoint/syscalls/sys_enter_openat")
int on_openat(struct trace_event_raw_sys_enter* ctx) {
  return on_open((const char*)BPF_CORE_READ(ctx, args[1]));
}

SEC("tracepoint/syscalls/sys_enter_openat2")
int on_openat2(struct trace_event_raw_sys_enter* ctx) {
  return on_open((const char*)BPF_CORE_READ(ctx, args[1]));
}

SEC("tracepoint/syscalls/sys_exit_openat")
int on_openat_exit(struct trace_event_raw_sys_exit* ctx) {
  return on_open_return(BPF_CORE_READ(ctx, ret));
}

SEC("tracepoint/syscalls/sys_exit_openat2")
int on_openat2_exit(struct trace_event_raw_sys_exit* ctx) {
  return on_open_return(BPF_CORE_READ(ctx, ret));
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct* task) {
  __u64 id = bpf_get_current_pid_tgid();
  bpf_map_delete_elem(&opening, &id);
  __u32 tgid = id >> 32;
  if ((__u32)id != tgid) return 0;
  if (!bpf_map_lookup_elem(&tracked, &tgid)) return 0;
  bpf_map_delete_elem(&tracked, &tgid);
  int status = BPF_CORE_READ(task, exit_code);
  /* A wait status: the exit code, or 128 + the signal that killed it (the shell's convention). */
  __s32 code = (status & 0x7f) ? 128 + (status & 0x7f) : (status >> 8) & 0xff;
  struct flyt_trace_header* r = reserve(sizeof(*r));
  if (!r) return 0;
  fill_header(r, FLYT_EV_EXIT, 0, 0, code, 0);
  bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
  return 0;
}
