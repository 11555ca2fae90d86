// pyconv._cupti: thin bindings over the CUPTI activity trace. Importing works without a GPU or driver; start()
// raises pyconv._cupti.CuptiError naming why it cannot trace.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "cupti/activity_trace.hpp"

namespace py = pybind11;
using namespace pyconv;

namespace {

const char* kind_name(ActivityKind k) {
  switch (k) {
    case ActivityKind::Kernel: return "kernel";
    case ActivityKind::Memcpy: return "memcpy";
    case ActivityKind::Memset: return "memset";
    case ActivityKind::Runtime: return "runtime";
    case ActivityKind::Driver: return "driver";
  }
  return "unknown";
}

py::dict to_dict(const ActivityRecord& r) {
  py::dict d;
  d["kind"] = kind_name(r.kind);
  d["name"] = r.name;
  d["start_ns"] = r.start_ns;
  d["end_ns"] = r.end_ns;
  d["correlation_id"] = r.correlation_id;
  switch (r.kind) {
    case ActivityKind::Kernel:
      d["device"] = r.device_id;
      d["stream"] = r.stream_id;
      d["grid"] = py::make_tuple(r.grid[0], r.grid[1], r.grid[2]);
      d["block"] = py::make_tuple(r.block[0], r.block[1], r.block[2]);
      d["registers_per_thread"] = r.registers_per_thread;
      d["static_shared_bytes"] = r.static_shared_bytes;
      d["dynamic_shared_bytes"] = r.dynamic_shared_bytes;
      break;
    case ActivityKind::Memcpy:
    case ActivityKind::Memset:
      d["device"] = r.device_id;
      d["stream"] = r.stream_id;
      d["bytes"] = r.bytes;
      break;
    case ActivityKind::Runtime:
    case ActivityKind::Driver:
      d["return_value"] = r.return_value;
      break;
  }
  return d;
}

}  // namespace

namespace {
// PYCONV_CUPTI_BACKTRACE=1: on a crash inside the trace, print the native stack (for bug reports), then die.
void print_native_stack(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char msg[] = "pyconv._cupti: fatal signal; native stack:\n";
  (void)!write(2, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

PYBIND11_MODULE(_cupti, m) {
  if (std::getenv("PYCONV_CUPTI_BACKTRACE")) signal(SIGSEGV, print_native_stack);
  m.doc() = "pyconv's CUPTI activity trace: kernels, memcpy/memset and CUDA API calls of this process";
  py::register_exception<CuptiError>(m, "CuptiError", PyExc_RuntimeError);

  m.def("start", &trace_start, py::arg("driver_api") = false,
        "Start tracing this process: concurrent kernels, memcpy, memset, runtime API calls (and driver API\n"
        "calls with driver_api=True). Raises CuptiError when there is no usable GPU or CUPTI refuses.");
  m.def("stop", &trace_stop, py::call_guard<py::gil_scoped_release>(),
        "Disable tracing and flush every CUPTI buffer; records() then holds the whole trace.");
  m.def("running", &trace_running, "True between start() and stop().");
  m.def(
      "records",
      [] {
        py::list out;
        for (const ActivityRecord& r : trace_records()) out.append(to_dict(r));
        return out;
      },
      "The records delivered so far, as dicts {kind: kernel|memcpy|memset|runtime|driver, name, start_ns,\n"
      "end_ns, correlation_id, ...}. Kernel names are demangled; API names have no version suffix.");
  m.def("dropped_records", &trace_dropped_records, "Records CUPTI dropped for lack of buffer space.");
  m.def("timestamp", &cupti_timestamp, "CUPTI's clock in ns, the clock of every record's start_ns/end_ns.");
  m.def(
      "versions",
      [] {
        py::dict d;
        d["cupti_header"] = cupti_header_version();
        d["cupti_library"] = cupti_library_version();
        return d;
      },
      "CUPTI API versions: compiled against (cupti_header) and loaded (cupti_library).");
  m.def("launch_test_kernel", &launch_profiler_test_kernel, py::arg("n_launches"),
        py::call_guard<py::gil_scoped_release>(),
        "Launch pyconv_profiler_test_kernel n_launches times, synchronise, and return how many ran (the\n"
        "profiler's test workload).");
}
