// gpu-student: a student's new-forward.cuh (this folder's skeleton, or the folder given to `invoke build --student
// DIR`), compiled unchanged behind what the course's framework did (student_glue.hpp: y zeroed, the layer's real
// stream in y.stream_->stream_, everything synchronised after the call), registered as a GPU variant.
//
// The registration comes BEFORE the student's file, which may #define B, C, H, W, M, K, x, y, min...; after it
// only PYCONV_STUDENT_BIND_GPU is expanded. The student's file is included with <>: the build puts the student's
// folder on the include path, and "" would find this folder's skeleton first (it sits beside this file).
#include "cuda/runtime/registry.cuh"
#include "student/student_glue.hpp"

namespace pyconv {

PYCONV_REGISTER_GPU_CONV(GpuConvVariant{
    .name = "gpu-student",
    .step = 100,  // after every ladder step
    .summary = "your new-forward.cuh (milestones 3, 4, final), compiled unchanged against the course's interface",
    // The course allowed half precision and top teams used it (cuda_fp16.h): hold a student's kernel to what fp16
    // products and sums reach. A wrong index is still caught: it is off by the size of the value itself.
    .rtol = 1e-2,
    .launch = student::run_gpu,
    .supports = student::why_unsupported,
    .graph_capturable = false,  // a student's code may keep buffers between calls
    .roles = {.m3 = on_request("the student's file: runs only when named with --impl gpu-student"),
              .m4 = on_request("the student's file: runs only when named with --impl gpu-student"),
              .final = on_request("the student's file: runs only when named with --impl gpu-student")},
});

}  // namespace pyconv

#include <new-forward.cuh>
PYCONV_STUDENT_BIND_GPU;
