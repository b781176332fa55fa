// flyt tracks writes to managed memory with a SIGSEGV handler; a program's own SIGSEGV handler,
// installed before the first managed allocation, still gets the faults that are its own.
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include "program.h"

static sigjmp_buf jump;
static volatile sig_atomic_t program_faults = 0;

static void OnSegv(int, siginfo_t*, void*) {
  program_faults = program_faults + 1;
  siglongjmp(jump, 1);
}

__global__ void inc(int* x) { *x += 1; }

int main() {
  struct sigaction action {};
  action.sa_sigaction = OnSegv;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSEGV, &action, nullptr) != 0) FAIL("sigaction");
  int* m;
  CHECK(cudaMallocManaged(&m, 3 * 4096));
  // Writes and reads of managed memory never reach the program's handler.
  for (int i = 0; i < 3 * 1024; ++i) m[i] = i;
  inc<<<1, 1>>>(m);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  long sum = 0;
  for (int i = 0; i < 3 * 1024; ++i) sum += m[i];
  long want = (3L * 1024 * (3 * 1024 - 1)) / 2 + (KERNELS_RUN ? 1 : 0);
  if (sum != want) FAIL("sum %ld want %ld", sum, want);
  if (program_faults != 0) FAIL("the program's handler saw a managed-memory fault");
  // A fault of the program's own (a read-only page) reaches its handler.
  void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) FAIL("mmap");
  if (sigsetjmp(jump, 1) == 0) {
    *static_cast<volatile int*>(page) = 1;
    FAIL("the write to a read-only page did not fault");
  }
  if (program_faults != 1) FAIL("program faults %d", static_cast<int>(program_faults));
  CHECK(cudaFree(m));
  PASS();
}
