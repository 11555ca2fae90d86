// pyconv._cupti: an in-process CUPTI activity trace (kernels, memcpy/memset, runtime and driver API calls), the
// data behind `invoke profile`'s nvprof-style summary. CUPTI traces the process that loads it, so the milestone
// child starts the trace itself (pyconv/profile.py).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pyconv {

// Every CUPTI failure (and the CUDA failures of the test helper) becomes this, carrying CUPTI's own error string.
struct CuptiError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ActivityKind { Kernel, Memcpy, Memset, Runtime, Driver };

struct ActivityRecord {
  ActivityKind kind;
  std::string name;  // demangled kernel name, "[CUDA memcpy HtoD]", "[CUDA memset]", "cudaMalloc", "cuLaunchKernel"
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t correlation_id = 0;
  uint32_t device_id = 0, stream_id = 0;  // GPU activities only
  uint64_t bytes = 0;                     // memcpy / memset
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};  // kernels
  uint32_t registers_per_thread = 0;
  int32_t static_shared_bytes = 0, dynamic_shared_bytes = 0;
  uint32_t return_value = 0;  // API calls: the cudaError_t / CUresult the call returned
};

// Starts tracing this process. Throws CuptiError when there is no usable GPU or CUPTI refuses (another profiler
// attached, driver too old, ...). Records from an earlier trace are discarded.
void trace_start(bool driver_api);
// Flushes every buffer (forced) and disables the activity kinds; the records stay readable until the next start.
void trace_stop();
bool trace_running();
std::vector<ActivityRecord> trace_records();
uint64_t trace_dropped_records();
// CUPTI's clock (ns), the one every record's start/end is on.
uint64_t cupti_timestamp();
// The CUPTI API version this module was compiled against and the one of the libcupti actually loaded (a process
// that loaded another libcupti.so.13 first, e.g. PyTorch's wheel, shares that one).
uint32_t cupti_header_version();
uint32_t cupti_library_version();

// Launches pyconv_profiler_test_kernel n times on the default stream (one thread, atomicAdd on a device
// counter), synchronises, and returns the counter: the test's proof that exactly n launches ran.
long long launch_profiler_test_kernel(int n_launches);

}  // namespace pyconv
