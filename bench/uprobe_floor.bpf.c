/* The floor of bench/trace_bench.sh: BPF programs that do nothing, so what a call costs with them
 * attached is the price of the uprobe (and uretprobe) trap on this machine and nothing else. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int floor_entry(void *ctx) { return 0; }

SEC("uretprobe")
int floor_return(void *ctx) { return 0; }
