// The interface generation 2023fa, for the glue (minidnn_cpu.cpp, minidnn_gpu.cu): the only facts it needs.
#pragma once
#define PYCONV_MINIDNN_GENERATION "2023fa"
// 1: GPUInterface has conv_forward_gpu_prolog / conv_forward_gpu / conv_forward_gpu_epilog (device pointers);
// 0: one host call conv_forward_gpu(host_y, host_x, host_k, ...) that allocates, copies, launches and frees.
#define PYCONV_MINIDNN_PROLOG_EPILOG 1
// 1: every student function ends with a stride `const int S` (output (H - K) / S + 1).
#define PYCONV_MINIDNN_STRIDE 1
