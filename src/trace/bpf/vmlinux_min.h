/* The few kernel types cuda_trace.bpf.c needs, written by hand instead of a generated vmlinux.h
 * (130,000 lines): fixed-width typedefs, the BPF constants of <linux/bpf.h> it uses, x86-64's
 * struct pt_regs and the few fields of the kernel's structs the control hooks read. Structs carry preserve_access_index, so libbpf
 * relocates every field access against the running kernel's BTF (CO-RE): only the names and
 * types of the fields used matter, not their order or the fields left out. */
#ifndef FLYT_TRACE_BPF_VMLINUX_MIN_H_
#define FLYT_TRACE_BPF_VMLINUX_MIN_H_
/* Tells bpf_tracing.h the kernel's register names (di, si, ...) are in use, as with vmlinux.h. */
#define __VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef int pid_t;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
  BPF_MAP_TYPE_HASH = 1,
  BPF_MAP_TYPE_ARRAY = 2,
  BPF_MAP_TYPE_PERCPU_ARRAY = 6,
  BPF_MAP_TYPE_RINGBUF = 27,
  BPF_MAP_TYPE_TASK_STORAGE = 29,
};

/* Map flags and bpf_task_storage_get's flags. */
enum {
  BPF_F_NO_PREALLOC = 1,
};
enum {
  BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
  BPF_ANY = 0,
  BPF_NOEXIST = 1,
  BPF_EXIST = 2,
};

/* bpf_ringbuf_submit/output flags and bpf_ringbuf_query's questions. */
enum {
  BPF_RB_NO_WAKEUP = 1,
  BPF_RB_FORCE_WAKEUP = 2,
};
enum {
  BPF_RB_AVAIL_DATA = 0,
  BPF_RB_RING_SIZE = 1,
  BPF_RB_CONS_POS = 2,
  BPF_RB_PROD_POS = 3,
};

/* x86-64 user registers as a uprobe sees them. */
struct pt_regs {
  unsigned long r15;
  unsigned long r14;
  unsigned long r13;
  unsigned long r12;
  unsigned long bp;
  unsigned long bx;
  unsigned long r11;
  unsigned long r10;
  unsigned long r9;
  unsigned long r8;
  unsigned long ax;
  unsigned long cx;
  unsigned long dx;
  unsigned long si;
  unsigned long di;
  unsigned long orig_ax;
  unsigned long ip;
  unsigned long cs;
  unsigned long flags;
  unsigned long sp;
  unsigned long ss;
} __attribute__((preserve_access_index));

struct linux_binprm {
  const char* filename;
} __attribute__((preserve_access_index));

struct trace_entry {
  unsigned short type;
  unsigned char flags;
  unsigned char preempt_count;
  int pid;
} __attribute__((preserve_access_index));

/* syscalls/sys_enter_*: the syscall number, then its six arguments. */
struct trace_event_raw_sys_enter {
  struct trace_entry ent;
  long id;
  unsigned long args[6];
} __attribute__((preserve_access_index));

/* syscalls/sys_exit_*: the syscall number and its return value. */
struct trace_event_raw_sys_exit {
  struct trace_entry ent;
  long id;
  long ret;
} __attribute__((preserve_access_index));

/* The uretprobe state of a task: the frames whose return addresses the kernel replaced with its
 * trampoline, newest first; `stack` is the stack pointer at the probed entry (where the return
 * address lies), `orig_ret_vaddr` the real return address. */
struct return_instance {
  unsigned long stack;
  unsigned long orig_ret_vaddr;
  struct return_instance* next;
} __attribute__((preserve_access_index));

struct uprobe_task {
  struct return_instance* return_instances;
} __attribute__((preserve_access_index));

/* Where the process's environment strings lie in its memory (/proc/<pid>/environ reads them). */
struct mm_struct {
  unsigned long env_start;
  unsigned long env_end;
} __attribute__((preserve_access_index));

struct task_struct {
  int exit_code;
  struct uprobe_task* utask;
  struct mm_struct* mm;
} __attribute__((preserve_access_index));

#endif /* FLYT_TRACE_BPF_VMLINUX_MIN_H_ */
