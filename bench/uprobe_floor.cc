// flyt-bench-uprobe-floor: attaches empty BPF programs to functions of one file, for every process
// that maps it, and holds them until SIGINT/SIGTERM — the "(b) empty uprobe" case of
// bench/trace_bench.sh (the cost of the trap itself, beside untraced and flyt's tracer).
//
//   flyt-bench-uprobe-floor --file PATH --symbol NAME... [--return] [--ready-file F]
//
// --return also attaches an empty uretprobe to each symbol (the floor of a probe that reads a
// result). Needs root. Exit 3 when the programs cannot be loaded or attached.
#include <bpf/libbpf.h>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include "uprobe_floor.skel.h"

namespace {
volatile std::sig_atomic_t stop = 0;
void OnSignal(int) { stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flyt-bench-uprobe-floor — empty uprobes, the floor of a traced call"};
  std::string file;
  std::vector<std::string> symbols;
  bool with_return = false;
  std::string ready_file;
  app.add_option("--file", file, "the library or executable to probe")->required();
  app.add_option("--symbol", symbols, "function to probe (repeatable)")->required();
  app.add_flag("--return", with_return, "also attach an empty uretprobe");
  app.add_option("--ready-file", ready_file, "written once every probe is attached");
  CLI11_PARSE(app, argc, argv);

  uprobe_floor* skel = uprobe_floor__open_and_load();
  if (skel == nullptr) {
    std::fprintf(stderr, "flyt-bench-uprobe-floor: cannot load the BPF programs (root?)\n");
    return 3;
  }
  std::vector<bpf_link*> links;
  for (const std::string& symbol : symbols) {
    for (int ret = with_return ? 1 : 0; ret >= 0; --ret) {
      LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret == 1, .func_name = symbol.c_str());
      bpf_program* prog = ret == 1 ? skel->progs.floor_return : skel->progs.floor_entry;
      bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, file.c_str(), 0, &opts);
      if (link == nullptr) {
        std::fprintf(stderr, "flyt-bench-uprobe-floor: cannot attach to %s in %s\n",
                     symbol.c_str(), file.c_str());
        return 3;
      }
      links.push_back(link);
    }
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (!ready_file.empty()) std::ofstream(ready_file) << "ready\n";
  while (!stop) pause();
  for (bpf_link* link : links) bpf_link__destroy(link);
  uprobe_floor__destroy(skel);
  return 0;
}
