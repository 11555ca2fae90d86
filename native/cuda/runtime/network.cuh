// The whole network on one GPU: weights uploaded once, a batch goes to the device once (as uint8 when the
// images are uint8), only the predicted labels come back.
//
// forward(images, impls, chunks, streams):
//   - impls names one registry variant per conv layer. A variant with the TanhMaxPool2 epilogue replaces its
//     conv + the following tanh + max-pool 2/2 (refused when the next layers are not exactly those). A variant
//     with x_on_host reads the images from pinned host memory itself; only the network's first layer may. Any
//     other activation followed by a max-pool runs inside the pool, on each window's max (pool2d in layers.cuh).
//   - chunks = 1 (the course's measurement): the batch is one launch per layer, and each conv's op time is
//     cudaDeviceSynchronize, host steady_clock, the conv launch, cudaDeviceSynchronize, host clock. For a fused
//     variant the op time covers conv + tanh + pool.
//   - chunks > 1 (unless the first conv's variant reads host memory itself: that pass runs whole, timed as
//     chunks = 1): the batch is split into `chunks` parts, each `taper` times the one before (1: equal parts).
//     Their copies run back to back, in order, on a copy stream of their own into one device buffer for the pass;
//     each part computes on one of `streams` streams (round-robin) as soon as its copy has landed. So the copy
//     engine never waits for compute, and compute starts after the first part's copy, not the whole batch's. What
//     runs after the last copy is the last part's compute: a taper below 1 makes that part the smallest, while
//     each part's compute still fits under the next part's copy when the network computes faster than it copies;
//     a taper above 1 makes the first part, the copy nothing computes beside, the smallest. With tail_pieces > 1
//     the last part's copy is split further: its conv layers (the plan's image steps) run on each piece as it
//     lands, each piece on a stream of its own (its image steps before the last in scratch of its own, the last
//     into its rows of the lane's buffers), its FC layers once on the whole part in the lane after every piece, so
//     only the last piece's conv layers and the FC layers remain after the last copy. On sp19 (H200)
//     every piece costs a copy gap (~2 us) and a copy-to-kernel hand-off (3-6 us), and from 3 pieces on the
//     pieces' conv layers fall behind their copies (plan.py's FINAL_TAIL_PIECES).
//     No device-wide synchronisation (it would serialise the streams): each conv's op time is the sum over parts
//     of CUDA-event time around that part's conv launch, which may include time shared with the other streams'
//     work.
//   - From pinned memory, a chunked pass whose variants are all graph_capturable is captured into one CUDA graph
//     the second time the same pass comes (same sizes, pointers, variants and FC math; the first run is plain,
//     and warms what a variant sets up once) and replayed after: one launch on the host instead of ~10 per
//     part. ForwardResult::replayed says whether it was. The copies stay outside the graph: every call queues
//     them first, then launches the compute, whose parts wait for their copies' events, so the copy engine
//     starts while the host is still launching the graph. sp19 on an H200, 16 parts on 4 streams, pinned (the
//     pipeline rows of results/bench-e2e-nvidia-h200-2026-11-24-*.json): 0.841 ms plain (-sp19-events), 0.787
//     replayed with the copies in order (-sp19-graph-events), 0.619 without the op-time events too (-sp19-graph):
//     in a replayed graph those events cost more than the launches did (op_times below).
//   - uint8 images: when the first layer's variant reads uint8 itself (launch_u8), it gets the raw images;
//     otherwise one kernel widens them to float32 first.
//   - The fully connected layers run in FP32 (cublasSgemm) unless set_fc_math(FcMath::TF32 or FP16) (see
//     layers.cuh). Under FP16 a conv whose variant has launch_f16_out (launch_u8_f16_out from the uint8 images)
//     and whose output goes straight (through a flatten) into a fully connected layer writes it in half; any other
//     FC input is rounded by one kernel. A
//     network ending FC (+ activation) -> FC with a small last layer (fits_head) runs the last FC in float32 FMAs
//     inside one head kernel with the bias, activation and argmax of the tail.
//   - Out of device memory: when the buffers for a pass (or anything a variant allocates) do not fit, the
//     activation buffers are freed and the pass retried on half as many images, down to one image; the
//     result says how many passes ran. Only then does the failure reach the caller (CudaError), and the
//     object stays usable.
// Buffers grow only and are reused by later calls; the weights are uploaded once in the constructor. Every
// public method first makes the network's own GPU current, so one GpuNetwork per GPU can live in a process.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/runtime/registry.cuh"
#include "cuda/runtime/device_buffer.cuh"
#include "cuda/runtime/layers.cuh"

namespace pyconv {

// One layer as described by the model file (pyconv.model.Layer.spec()) plus its host weights.
struct LayerDesc {
  std::string type;  // conv | tanh | relu | sigmoid | pool | flatten | fc | softmax
  int64_t out_channels = 0, kernel = 0, stride = 0, out_features = 0;
  std::string mode;  // pool: max | avg
  std::vector<int64_t> weight_shape;
  std::vector<float> weight, bias;
};

enum class InputType { U8, F32 };

struct ForwardResult {
  std::vector<double> op_seconds;  // one per conv layer
  size_t peak_bytes = 0;           // device bytes held by this network's buffers (weights included), at most
  int passes = 0;                  // > 1 when the batch was split because it did not fit
  int64_t rows_per_pass = 0;
  bool replayed = false;           // every pass ran as a replayed CUDA graph
  // forward(..., gpu_span=true): milliseconds on the GPU's clock from just before the first copy of each pass to
  // the end of its last work (CUDA events), summed over the passes; the rest of the call's time is the host's.
  double gpu_ms = 0;
};

// The steps of a plan GpuNetwork::run_lane queues: [begin, end), on the rows of a part from row0 on (only the
// image steps may start past the part's first row).
struct StepSpan {
  size_t begin = 0, end = SIZE_MAX;
  int64_t row0 = 0;
  // A piece of a part (queue_chunks): where its image steps before the last keep their outputs instead of the
  // lane's a and b (each room for the piece's rows at the plan's piece_elems); null: in the lane's buffers.
  float* scratch[2] = {nullptr, nullptr};
};

class GpuNetwork {
 public:
  GpuNetwork(std::vector<LayerDesc> layers, int64_t C, int64_t H, int64_t W, int device);
  ~GpuNetwork();
  GpuNetwork(const GpuNetwork&) = delete;
  GpuNetwork& operator=(const GpuNetwork&) = delete;

  // op_times = false: no per-layer timing at all (no device synchronisation around each conv with one chunk, no
  // CUDA events between the layers of a chunked pass: each costs time of its own, tens of microseconds per part in
  // a replayed graph); ForwardResult::op_seconds is then empty.
  // taper (chunks > 1, 0 < taper <= 4): each part holds `taper` times the images of the part before (1: equal
  // parts).
  // tail_pieces (chunks > 1, 1..kMaxTailPieces): the last part's copy in that many pieces, its conv layers run on
  // each piece as it lands (where the first conv reads the uint8 images itself; else 1), its fully connected
  // layers on the whole part after the last: what computes after the last copy is then one piece's conv layers and
  // the part's FC layers, not all of the part.
  static constexpr int kTailPieces = 1;
  static constexpr int kMaxTailPieces = 64;
  ForwardResult forward(const void* images, InputType type, int64_t n, int32_t* labels,
                        const std::vector<std::string>& impls, int chunks = 1, int streams = 2, bool op_times = true,
                        double taper = 1.0, int tail_pieces = kTailPieces, bool gpu_span = false);
  // The images stay on the device; each rep times the whole network (conversion, every layer, argmax) by
  // CUDA events on one stream. Returns milliseconds per rep.
  // chunks > 1: the batch in parts on `streams` streams as forward runs it (the copies left out), the parts of
  // different streams computing side by side.
  std::vector<float> forward_resident(const void* images, InputType type, int64_t n,
                                      const std::vector<std::string>& impls, int warmup, int reps, int chunks = 1,
                                      int streams = 1, double taper = 1.0);

  // The network's final activations out[n][classes] (one chunk, softmax skipped like in forward): the test hook
  // that checks every layer kernel against the numpy reference through small networks.
  std::vector<float> logits(const void* images, InputType type, int64_t n, const std::vector<std::string>& impls);

  // Where each part of a chunked pass starts: min(chunks, rows) + 1 offsets from 0 to rows, each part `taper`
  // times the one before (rounded; every part at least one image). invalid_argument unless rows, chunks >= 1 and
  // 0 < taper <= 4.
  static std::vector<int64_t> chunk_starts(int64_t rows, int chunks, double taper);

  // FcMath::FP16 rounds each fully connected layer's weights to half once, here (the first time it is set).
  void set_fc_math(FcMath m);
  FcMath fc_math() const { return fc_math_; }
  size_t conv_count() const { return conv_count_; }
  int64_t classes() const { return layers_.back().out_c; }
  size_t peak_bytes() const { return peak_bytes_; }
  size_t bytes_held() const;
  int device() const { return device_; }

 private:
  enum class Kind { Conv, Act, Pool, Flatten, FC, Softmax };
  struct Layer {
    Kind kind;
    Activation act = Activation::None;
    int64_t in_c = 0, in_h = 1, in_w = 1, out_c = 0, out_h = 1, out_w = 1;  // per image (flat: c = features)
    int64_t kernel = 0, stride = 0;
    bool max_mode = true;
    int conv_index = -1;
    DeviceBuffer<float> w, b;
    DeviceBuffer<__half> w16;  // FC under FcMath::FP16: w in half, [fc16_rows(out_c)][in_c], the extra rows zero
    int64_t in_elems() const { return in_c * in_h * in_w; }
    int64_t out_elems() const { return out_c * out_h * out_w; }
  };
  struct Step {
    const Layer* layer;
    const GpuConvVariant* variant = nullptr;  // conv only
    Activation fc_act = Activation::None;     // FC fused with the activation after it
    Activation pool_act = Activation::None;   // max-pool with the activation before it (applied to each max)
    // conv under FcMath::FP16 whose output goes straight into an FC layer: written in half where the variant can
    // (launch_f16_out, or launch_u8_f16_out from the uint8 images), else rounded before the GEMM
    bool feeds_fc16 = false;
    int64_t out_elems = 0;  // what this step stores per image (a fused conv: its pooled output)
  };
  struct Plan {
    std::vector<Step> steps;
    bool host_input = false;  // the first conv's variant reads x from pinned host memory
    bool u8_first = false;    // the first layer is a conv whose variant can read the uint8 images itself
    int64_t max_elems = 0;    // largest activation of one image that this plan stores (a fused conv's un-pooled
                              // output is not one: for sp19 5184 floats instead of 11616)
    int64_t classes = 0;
    // The last two steps are FC (+ activation) -> FC: the first runs as a bare GEMM and the second, with the
    // first's bias and activation and the argmax, as one fc_head kernel (layers.cuh), when the sizes fit it.
    bool head = false;
    // steps[0, image_steps) work on each image alone (conv, activation, pooling): they can run on any range of
    // rows; the fully connected steps after them run on a whole part.
    size_t image_steps = 0;
    // The largest output per image of the image steps before the last: what a piece's scratch holds per image.
    int64_t piece_elems = 0;
  };

  // One stream with its own cuBLAS handle and buffers (ping-pong activations, the uint8 input, the labels).
  struct Lane {
    Stream stream;
    CublasHandle blas;
    DeviceBuffer<uint8_t> in_u8;
    DeviceBuffer<float> a, b;
    DeviceBuffer<int32_t> labels;
    Lane();
    size_t bytes() const { return in_u8.bytes() + a.bytes() + b.bytes() + labels.bytes(); }
  };
  enum class Timing { None, HostSync, Events };

  Plan make_plan(const std::vector<std::string>& impls) const;
  void ensure_lanes(size_t n);
  // Buffers grow only: a and b hold rows * max_elems floats (the plan's largest stored activation per image).
  void size_lane(Lane& L, int64_t rows, bool u8_input, int64_t max_elems);
  void release_activations() noexcept;
  void note_peak(size_t extra = 0);
  // Queues every step for `rows` images whose float input is in L.a (or host_x for a host-input variant, or
  // x_u8 -- raw uint8 images on the device -- when plan.u8_first and the caller skipped the widening); the labels
  // end in `labels` (device-addressable; null: L.labels) and the returned pointer holds the last activations.
  // events: 2 per conv (start, stop) when timing == Events. span: only those steps, on `rows` images from
  // span.row0 of the lane's buffers (x_u8 then points at those images already). stream: where they are queued
  // (null: the lane's; another only for image steps, which use no cuBLAS handle).
  const float* run_lane(Lane& L, int64_t rows, const Plan& plan, Timing timing, std::vector<double>& op_seconds,
                        std::vector<Event>* events, const float* host_x, const uint8_t* x_u8,
                        int32_t* labels = nullptr, StepSpan span = {}, cudaStream_t stream = nullptr);
  // Returns true when the pass ran as a replayed graph.
  // gpu_ms: null, or where the pass's GPU span (ForwardResult::gpu_ms) is added.
  bool run_pass(const uint8_t* images, InputType type, int64_t rows, const Plan& plan, int chunks, int streams,
                double taper, int tail_pieces, bool op_times, int32_t* labels_out, std::vector<double>& op_seconds,
                double* gpu_ms);
  // What a captured pass depends on: when all of it is unchanged, the graph replays the same work.
  struct GraphKey {
    std::vector<const void*> ptrs;
    std::vector<int64_t> sizes;
    bool operator==(const GraphKey& o) const { return ptrs == o.ptrs && sizes == o.sizes; }
    bool operator!=(const GraphKey& o) const { return !(*this == o); }
  };
  struct Chunking {
    std::vector<int64_t> at;  // chunk_starts
    // Where each copy starts (and the end): every part's start, and the last part's copy split into pieces
    // (tail_pieces) whose image steps run as each lands.
    std::vector<int64_t> piece_at;
    int64_t nchunks;
    size_t nlanes, in_bytes;
    Timing timing;  // None or Events
  };
  // The chunked pass (chunks > 1, see forward): copies on copy_stream_ into pass_in_, compute on the lanes.
  // src: the images in pinned memory, or staging_ that each part's pageable images are copied into first
  // (pageable != nullptr), or with on_device the images on the device (no copies: forward_resident). Starts with
  // every lane waiting for copy_stream_ and ends with every lane joined back into it; labels_dst may be null.
  void queue_chunks(const Chunking& ck, const uint8_t* src, const uint8_t* pageable, bool on_device, InputType type,
                    const Plan& plan, int32_t* labels_dst, cudaStream_t origin);
  // Queues piece `piece`'s host-to-device copy on copy_stream_ into pass_in_ and records copied_[piece]
  // (pageable: through staging_ first).
  void queue_copy(const Chunking& ck, size_t piece, const uint8_t* src, const uint8_t* pageable);
  // Splits `rows` into parts and makes the lanes, their buffers, the copy stream and the events ready for them.
  Chunking prepare_chunks(int64_t rows, int chunks, int streams, double taper, size_t in_bytes, const Plan& plan,
                          Timing timing, int tail_pieces = 1);
  // Runs queue() -- a chunked pass starting from and joined back into `origin` -- plain, or as a CUDA graph
  // launched on `origin`: captured the second time in a row the same key comes, replayed while it stays the same.
  // key null: never a graph. Returns true when replayed.
  bool launch_chunks(cudaStream_t origin, GraphKey* key, const std::function<void()>& queue);
  static bool capturable(const Plan& plan);  // every variant of the plan is graph_capturable
  GraphKey graph_key(const Chunking& ck, const uint8_t* src, bool on_device, InputType type, const Plan& plan,
                     const int32_t* labels_dst) const;
  // Where a lane's first layer finds its images (run_lane's host_x and x_u8).
  struct StagedInput {
    const float* host_x = nullptr;  // a host-input variant's float32 images in pinned memory
    const uint8_t* x_u8 = nullptr;  // raw uint8 images on the device, for a first conv that widens them itself
  };
  // The one place images enter a lane: `rows` images of `type` at `images` -- host memory, or device memory when
  // on_device -- are put where the plan's first layer reads them, queued on the lane's stream:
  //   - plan.host_input: nothing is queued, host_x (from stage_host_input) is what the first conv reads;
  //   - uint8: copied into L.in_u8 (unless on the device already), then widened into L.a unless the first conv
  //     reads uint8 itself;
  //   - float32: copied into L.a.
  StagedInput stage_input(Lane& L, const Plan& plan, const uint8_t* images, InputType type, int64_t rows,
                          bool on_device, const float* host_x);
  // A host-input variant's images: `rows` images as float32 in pinned memory (staging_f32_).
  const float* stage_host_input(const void* images, InputType type, int64_t rows);

  int device_;
  int64_t C_, H_, W_;
  std::vector<Layer> layers_;
  size_t conv_count_ = 0;
  std::vector<std::unique_ptr<Lane>> lanes_;
  PinnedBuffer<uint8_t> staging_;    // the pass's images, for chunked copies
  PinnedBuffer<float> staging_f32_;  // the pass's images as float, for a host-input variant
  PinnedBuffer<int32_t> labels_host_;
  std::vector<std::vector<Event>> chunk_events_;  // [piece][2 per conv]: run_pass's op-time events, reused
  std::optional<Stream> copy_stream_;             // a chunked pass's host-to-device copies, in order (made at the
                                                  // first chunked pass: the constructor touches no GPU)
  std::optional<Stream> pass_stream_;             // a chunked pass from pinned memory: where its compute starts
                                                  // and ends (its graph's stream); the copies stay on copy_stream_
  DeviceBuffer<uint8_t> pass_in_;                 // a chunked pass's images on the device
  std::vector<Event> copied_;                     // [piece]: its images have landed in pass_in_
  std::vector<Event> joined_;                     // [lane]: its last part is done (copy_stream_ waits on it)
  // A part in pieces: each piece's image steps on a stream of its own (piece_streams_[i] for its i-th piece),
  // forked from the part's lane (forked_[piece]) and joined back before its FC steps (pieced_[piece]).
  std::vector<Stream> piece_streams_;
  std::vector<Event> forked_, pieced_;
  // forward(..., gpu_span=true): a pass's first and last marks on the GPU's clock (made at the first such call)
  std::optional<Event> span_start_, span_end_;
  // The pieces' scratch (StepSpan::scratch): each piece's rows of the part at the plan's piece_elems per image.
  DeviceBuffer<float> piece_scratch_[2];
  // forward's last plan and what it was made for: making one costs the host microseconds before the first copy
  std::optional<Plan> plan_;
  std::vector<std::string> plan_impls_;
  FcMath plan_fc_math_ = FcMath::FP32;
  GraphExec graph_;                               // the captured chunked pass ...
  GraphKey graph_key_;                            // ... and what it was captured for
  GraphKey seen_key_;                             // the last chunked pass that ran without a graph
  bool graph_refused_ = false;                    // capturing seen_key_'s pass failed: it runs without a graph
  size_t peak_bytes_ = 0;
  FcMath fc_math_ = FcMath::FP32;
};

}  // namespace pyconv
