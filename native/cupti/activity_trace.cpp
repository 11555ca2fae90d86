// The CUPTI activity API in the shape nvprof used: fixed-size buffers handed to CUPTI on request, parsed on
// completion (on CUPTI's worker thread, hence the mutex), records copied out with their names resolved at once
// (CUPTI owns the kernel name strings only for the life of the buffer).
#include "cupti/activity_trace.hpp"

#include <cupti.h>
#include <cuda_runtime.h>
#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace pyconv {
namespace {

[[noreturn]] void throw_cupti(CUptiResult r, const char* expr) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) s = "unknown CUPTI error";
  throw CuptiError(std::string(s) + " (CUPTI result " + std::to_string(int(r)) + ") in `" + expr + "`");
}

#define CUPTI_CHECK(expr)                                          \
  do {                                                             \
    CUptiResult pyconv_cupti_r_ = (expr);                          \
    if (pyconv_cupti_r_ != CUPTI_SUCCESS) throw_cupti(pyconv_cupti_r_, #expr); \
  } while (0)

// 8 MiB per buffer: a kernel record is ~250 bytes, so ~30k records before CUPTI asks for the next one.
constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr size_t kBufferAlign = 8;

struct TraceState {
  std::mutex mu;
  std::vector<ActivityRecord> records;
  uint64_t dropped = 0;
  bool callbacks_registered = false;
  bool running = false;
  std::vector<CUpti_ActivityKind> enabled;
  std::string callback_error;  // a CUPTI failure inside the completion callback, reported by trace_stop()
};

// Never destroyed: CUPTI may hand back a last buffer while the process exits, after static destructors ran.
TraceState& state() {
  static TraceState* s = new TraceState;
  return *s;
}

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed kernel>";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);  // C names (extern "C") are not mangled
}

// "cudaMalloc_v3020" -> "cudaMalloc", as nvprof prints it.
std::string api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const char* raw = nullptr;
  if (cuptiGetCallbackName(domain, cbid, &raw) != CUPTI_SUCCESS || raw == nullptr)
    return (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "<runtime cbid " : "<driver cbid ") + std::to_string(cbid) + ">";
  // No std::regex here: it runs on CUPTI's thread and needs the process's C++ locale, which crashed (SIGSEGV in
  // codecvt) in processes where a wheel had loaded its own libstdc++ first (h5py's, on the GPU machine).
  std::string name(raw);
  const size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() &&
      name.find_first_not_of("0123456789", v + 2) == std::string::npos)
    name.erase(v);
  return name;
}

const char* memcpy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[CUDA memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[CUDA memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "[CUDA memcpy HtoA]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "[CUDA memcpy AtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "[CUDA memcpy AtoA]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "[CUDA memcpy AtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "[CUDA memcpy DtoA]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[CUDA memcpy DtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "[CUDA memcpy HtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[CUDA memcpy PtoP]";
    default: return "[CUDA memcpy]";
  }
}

// Copies one CUPTI record into ours; false for a kind we did not ask for (none should arrive).
bool convert(const CUpti_Activity* a, ActivityRecord& r) {
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      // The toolkit's header names the record version CUPTI of the same toolkit writes (CUDA 13: Kernel10).
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
      r.kind = ActivityKind::Kernel;
      r.name = demangle(k->name);
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.correlation_id = k->correlationId;
      r.device_id = k->deviceId;
      r.stream_id = k->streamId;
      r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
      r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
      r.registers_per_thread = k->registersPerThread;
      r.static_shared_bytes = k->staticSharedMemory;
      r.dynamic_shared_bytes = k->dynamicSharedMemory;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
      r.kind = ActivityKind::Memcpy;
      r.name = memcpy_name(m->copyKind);
      r.start_ns = m->start;
      r.end_ns = m->end;
      r.correlation_id = m->correlationId;
      r.device_id = m->deviceId;
      r.stream_id = m->streamId;
      r.bytes = m->bytes;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
      r.kind = ActivityKind::Memset;
      r.name = "[CUDA memset]";
      r.start_ns = m->start;
      r.end_ns = m->end;
      r.correlation_id = m->correlationId;
      r.device_id = m->deviceId;
      r.stream_id = m->streamId;
      r.bytes = m->bytes;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(a);
      const bool runtime = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      r.kind = runtime ? ActivityKind::Runtime : ActivityKind::Driver;
      r.name = api_name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, api->cbid);
      r.start_ns = api->start;
      r.end_ns = api->end;
      r.correlation_id = api->correlationId;
      r.return_value = api->returnValue;
      return true;
    }
    default:
      return false;
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_num_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // size 0: CUPTI drops records (counted) rather than writing into nothing
  *max_num_records = 0;               // as many as fit
}

// Runs on CUPTI's thread: no exception may leave it, so a failure is stored and raised by trace_stop().
void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  std::vector<ActivityRecord> parsed;
  std::string error;
  try {
    CUpti_Activity* a = nullptr;
    for (;;) {
      const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &a);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the valid part of the buffer
      if (r != CUPTI_SUCCESS) throw_cupti(r, "cuptiActivityGetNextRecord(buffer, valid_size, &a)");
      ActivityRecord rec{};
      if (convert(a, rec)) parsed.push_back(std::move(rec));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  size_t dropped = 0;
  const CUptiResult dr = cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped);
  std::free(buffer);
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.records.insert(s.records.end(), std::make_move_iterator(parsed.begin()), std::make_move_iterator(parsed.end()));
  if (dr == CUPTI_SUCCESS) s.dropped += dropped;
  if (!error.empty() && s.callback_error.empty()) s.callback_error = error;
}

void require_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw CuptiError(std::string("no usable CUDA GPU: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
  if (n == 0) throw CuptiError("no usable CUDA GPU: the driver reports 0 devices");
}

}  // namespace

void trace_start(bool driver_api) {
  TraceState& s = state();
  if (s.running) throw CuptiError("the CUPTI trace is already running (call stop() first)");
  require_gpu();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.records.clear();
    s.dropped = 0;
    s.callback_error.clear();
  }
  if (!s.callbacks_registered) {
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    s.callbacks_registered = true;
  }
  // CONCURRENT_KERNEL, not KERNEL: KERNEL serialises every launch, which would change what is being measured.
  std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME};
  if (driver_api) kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  s.enabled.clear();
  try {
    for (CUpti_ActivityKind k : kinds) {
      CUPTI_CHECK(cuptiActivityEnable(k));
      s.enabled.push_back(k);
    }
  } catch (...) {
    for (CUpti_ActivityKind k : s.enabled) cuptiActivityDisable(k);  // leave nothing half-enabled
    s.enabled.clear();
    throw;
  }
  s.running = true;
}

void trace_stop() {
  TraceState& s = state();
  if (!s.running) throw CuptiError("the CUPTI trace is not running (call start() first)");
  s.running = false;
  // Disable first so the flush delivers a closed set; FORCED also hands over partly filled buffers.
  std::string first_error;
  for (CUpti_ActivityKind k : s.enabled) {
    const CUptiResult r = cuptiActivityDisable(k);
    if (r != CUPTI_SUCCESS && first_error.empty()) {
      try {
        throw_cupti(r, "cuptiActivityDisable(kind)");
      } catch (const CuptiError& e) {
        first_error = e.what();
      }
    }
  }
  s.enabled.clear();
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  if (!first_error.empty()) throw CuptiError(first_error);
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.callback_error.empty()) throw CuptiError("while reading a CUPTI buffer: " + s.callback_error);
}

bool trace_running() { return state().running; }

std::vector<ActivityRecord> trace_records() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.records;
}

uint64_t trace_dropped_records() {
  TraceState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.dropped;
}

uint64_t cupti_timestamp() {
  uint64_t t = 0;
  CUPTI_CHECK(cuptiGetTimestamp(&t));
  return t;
}

uint32_t cupti_header_version() { return CUPTI_API_VERSION; }

uint32_t cupti_library_version() {
  uint32_t v = 0;
  CUPTI_CHECK(cuptiGetVersion(&v));
  return v;
}

}  // namespace pyconv
