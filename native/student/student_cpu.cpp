// cpu-student: a student's new-forward.h (this folder's skeleton, or the folder given to `invoke build --student
// DIR`), compiled unchanged behind what the course's framework did (student_glue.hpp), registered as a CPU variant.
//
// The registration comes BEFORE the student's file, which may #define B, C, H, W, M, K, x, y, min...; after it
// only PYCONV_STUDENT_BIND_CPU is expanded. The student's file is included with <>: the build puts the student's
// folder on the include path, and "" would find this folder's skeleton first (it sits beside this file).
#include "cpu/runtime/registry.hpp"
#include "student/student_glue.hpp"

namespace pyconv {

PYCONV_REGISTER_CPU_CONV(CpuConvVariant{
    .name = "cpu-student",
    .step = 100,  // after every variant of ours
    .summary = "your new-forward.h (milestone 2), compiled unchanged against the course's mxnet/mshadow interface",
    .launch = student::run_cpu,
    .supports = student::why_unsupported,
    .roles = {.m2 = on_request("the student's file: runs only when named with --impl cpu-student")},
});

}  // namespace pyconv

#include <new-forward.h>
PYCONV_STUDENT_BIND_CPU;
