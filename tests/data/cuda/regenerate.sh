#!/usr/bin/env bash
# Rebuilds the committed CUDA test data from the sources in tests/cuda and tests/data/cuda/src.
# Needs nvcc (CUDA 13); run from anywhere: tests/data/cuda/regenerate.sh [path/to/nvcc]
# The unit tests read these files, so they do not need nvcc themselves.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../../cuda"
nvcc="${1:-${FLYT_NVCC:-/usr/local/cuda/bin/nvcc}}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
archs=(-gencode arch=compute_80,code=sm_80 "-gencode=arch=compute_90,code=[sm_90,compute_90]")
fatbin() { "$nvcc" -fatbin -I"$src" "$@"; }

# many_params.cu in every container flavour: PTX zstd (nvcc's default), everything zstd,
# everything LZ4, PTX only (zstd and plain).
fatbin "${archs[@]}" -o "$here/many_params.fatbin" "$src/many_params.cu"
fatbin "${archs[@]}" -Xfatbin -compress-all -o "$here/many_params_compress_all.fatbin" "$src/many_params.cu"
fatbin "${archs[@]}" -Xfatbin -compress-all -Xfatbin -compress-mode=speed \
  -o "$here/many_params_lz4.fatbin" "$src/many_params.cu"
fatbin -gencode arch=compute_80,code=compute_80 -o "$here/many_params_ptx.fatbin" "$src/many_params.cu"
fatbin -gencode arch=compute_80,code=compute_80 -Xfatbin -compress=false \
  -o "$here/many_params_ptx_plain.fatbin" "$src/many_params.cu"
fatbin "${archs[@]}" -Xfatbin -compress-all -o "$here/matrix_mul.fatbin" "$src/matrix_mul.cu"
fatbin "${archs[@]}" -Xfatbin -compress-all -o "$here/templated.fatbin" "$src/templated.cu"
fatbin "${archs[@]}" -Xfatbin -compress-all -o "$here/layouts.fatbin" "$here/src/layouts.cu"
fatbin -gencode arch=compute_90,code=sm_90 -o "$here/sim_fault.fatbin" "$here/src/sim_fault.cu"

# -rdc=true: the device-linked container (.nv_fatbin) and the relocatable ones (__nv_relfatbin).
"$nvcc" -cudart=shared -rdc=true "${archs[@]}" -I"$src" -o "$tmp/rdc" "$src/rdc_main.cu" "$src/rdc_lib.cu"
objcopy -O binary --only-section=.nv_fatbin "$tmp/rdc" "$here/rdc_linked.fatbin"
objcopy -O binary --only-section=__nv_relfatbin "$tmp/rdc" "$here/rdc_relocatable.fatbin"

# The fuzzer's seed corpus: small inputs of each kind the fuzz target reads.
corpus="$here/corpus"
rm -f "$corpus"/*
fatbin -gencode arch=compute_80,code=sm_80 -Xfatbin -compress-all -o "$corpus/vector_add_zstd.fatbin" "$src/vector_add.cu"
fatbin -gencode arch=compute_80,code=sm_80 -Xfatbin -compress-all -Xfatbin -compress-mode=speed \
  -o "$corpus/vector_add_lz4.fatbin" "$src/vector_add.cu"
fatbin -gencode arch=compute_80,code=sm_80 -Xfatbin -compress=false -o "$corpus/vector_add_plain.fatbin" "$src/vector_add.cu"
fatbin -gencode arch=compute_80,code=compute_80 -o "$corpus/vector_add_ptx.fatbin" "$src/vector_add.cu"
fatbin -G -gencode arch=compute_90,code=compute_90 -o "$corpus/vector_add_debug_ptx.fatbin" "$src/vector_add.cu"
cp "$here/many_params_compress_all.fatbin" "$corpus/many_params_zstd.fatbin"
"$nvcc" -cubin -arch=sm_80 -I"$src" -o "$corpus/vector_add_sm80.cubin" "$src/vector_add.cu"
"$nvcc" -cubin -arch=sm_90 -I"$src" -o "$corpus/matrix_mul_sm90.cubin" "$src/matrix_mul.cu"
"$nvcc" -ptx -arch=sm_80 -I"$src" -o "$corpus/many_params.ptx" "$src/many_params.cu"
"$nvcc" -ptx -arch=sm_90 -o "$corpus/layouts.ptx" "$here/src/layouts.cu"
"$nvcc" -cudart=shared -rdc=true -gencode arch=compute_80,code=sm_80 -I"$src" -o "$tmp/rdc80" \
  "$src/rdc_main.cu" "$src/rdc_lib.cu"
objcopy -O binary --only-section=__nv_relfatbin "$tmp/rdc80" "$corpus/rdc_relocatable_sm80.fatbin"
ls -l "$here"/*.fatbin "$corpus"
