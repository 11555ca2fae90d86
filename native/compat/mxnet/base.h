// <mxnet/base.h> for the course's student files, written for this project (no MXNet code): it brings what the
// real header chain brought into new-forward.h / new-forward.cuh -- mshadow's Tensor, dmlc's CHECK/LOG, the
// standard headers students relied on without including them, and in CUDA translation units the CUDA runtime,
// cuda_fp16.h (half, half2) and, where the toolkit has it, cublas_v2.h (a few teams made their own handle).
#ifndef MXNET_BASE_H_
#define MXNET_BASE_H_
#if defined(__GNUC__)
#pragma GCC system_header
#endif

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#endif
#endif

#include "dmlc/logging.h"
#include "mshadow/tensor.h"

namespace mxnet {
typedef mshadow::cpu cpu;  // the student's `forward<gpu, float>` names these unqualified inside mxnet::op
typedef mshadow::gpu gpu;
typedef mshadow::index_t index_t;
typedef mshadow::default_real_t real_t;
namespace op {}
}  // namespace mxnet

#endif  // MXNET_BASE_H_
