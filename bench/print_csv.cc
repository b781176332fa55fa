// A stand-in for nvidia-smi in the spawn-per-sample benchmark: the smallest program that answers
// the two queries flyt makes, by printing $FLYT_BENCH_CSV_DIR/gpus.csv or apps.csv. Real
// nvidia-smi costs far more per run (it initialises NVML each time); this is the floor.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  const char* dir = std::getenv("FLYT_BENCH_CSV_DIR");
  if (dir == nullptr) return 2;
  bool apps = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--query-compute-apps", 20) == 0) apps = true;
  }
  std::string path = std::string(dir) + (apps ? "/apps.csv" : "/gpus.csv");
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return 3;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) std::fwrite(buf, 1, n, stdout);
  std::fclose(f);
  return 0;
}
