// RAII owners for device memory, pinned host memory, streams and events. Move-only; freeing never throws
// (a destructor that throws during unwinding would abort).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/runtime/cuda_check.cuh"

namespace pyconv {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  // Grows only: buffers reused across calls are not reallocated for smaller requests.
  void resize(size_t n) {
    if (n <= n_) return;
    release();
    // Through a local: after a failed cudaMalloc (out of memory) the buffer stays empty and valid.
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const T* host, size_t n, cudaStream_t st = nullptr) {
    resize(n);
    CUDA_CHECK(cudaMemcpyAsync(p_, host, n * sizeof(T), cudaMemcpyHostToDevice, st));
  }
  void download(T* host, size_t n, cudaStream_t st = nullptr) const {
    CUDA_CHECK(cudaMemcpyAsync(host, p_, n * sizeof(T), cudaMemcpyDeviceToHost, st));
  }

 private:
  void release() noexcept {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t n) { resize(n); }
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  void resize(size_t n) {
    if (n <= n_) return;
    release();
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, n * sizeof(T)));
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release() noexcept {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { if (s_) cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  // flags: cudaEventDisableTiming for an event that only orders streams (cheaper to record and wait on)
  explicit Event(unsigned flags = cudaEventDefault) { CUDA_CHECK(cudaEventCreateWithFlags(&e_, flags)); }
  ~Event() { if (e_) cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  cudaEvent_t get() const { return e_; }
  // A timing mark. Inside a stream capture it becomes an event-record node of the graph (the event is recorded
  // each time the graph runs); a plain cudaEventRecord there would only order the capture's streams.
  void record(cudaStream_t s = nullptr) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (s) CUDA_CHECK(cudaStreamIsCapturing(s, &cs));
    if (cs == cudaStreamCaptureStatusActive)
      CUDA_CHECK(cudaEventRecordWithFlags(e_, s, cudaEventRecordExternal));
    else
      CUDA_CHECK(cudaEventRecord(e_, s));
  }
  // `waiter` waits for the work queued on `s` before this call (both captured: an edge of the graph).
  void order(cudaStream_t s, cudaStream_t waiter) {
    CUDA_CHECK(cudaEventRecord(e_, s));
    CUDA_CHECK(cudaStreamWaitEvent(waiter, e_, 0));
  }
  // milliseconds from `start` to this event (both recorded, this one synchronised first)
  float since(const Event& start) const {
    CUDA_CHECK(cudaEventSynchronize(e_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

// An instantiated CUDA graph.
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraph_t g) { CUDA_CHECK(cudaGraphInstantiate(&e_, g, 0)); }
  ~GraphExec() { if (e_) cudaGraphExecDestroy(e_); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      if (e_) cudaGraphExecDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  explicit operator bool() const { return e_ != nullptr; }
  void launch(cudaStream_t s) const { CUDA_CHECK(cudaGraphLaunch(e_, s)); }

 private:
  cudaGraphExec_t e_ = nullptr;
};

}  // namespace pyconv
