#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>

#include "cuda/runtime/network.cuh"

namespace pyconv {
namespace {

std::string where(size_t i, const LayerDesc& d) { return "network layer " + std::to_string(i) + " (" + d.type + ")"; }

int64_t shape_elems(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

}  // namespace

GpuNetwork::Lane::Lane() { CUBLAS_CHECK(cublasSetStream(blas.get(), stream.get())); }

GpuNetwork::GpuNetwork(std::vector<LayerDesc> descs, int64_t C, int64_t H, int64_t W, int device)
    : device_(device), C_(C), H_(H), W_(W) {
  if (C < 1 || H < 1 || W < 1) throw std::invalid_argument("network: input shape must be positive");
  if (descs.empty()) throw std::invalid_argument("network: no layers");
  // Validate the whole chain on the host first: nothing touches the GPU for a malformed model.
  int64_t c = C, h = H, w = W;
  bool flat = false;
  std::vector<Layer> layers;
  layers.reserve(descs.size());
  for (size_t i = 0; i < descs.size(); ++i) {
    const LayerDesc& d = descs[i];
    Layer L;
    L.in_c = c; L.in_h = h; L.in_w = w;
    if (d.type == "conv") {
      if (flat) throw std::invalid_argument(where(i, d) + ": a convolution needs a C x H x W input");
      const auto& s = d.weight_shape;
      if (s.size() != 4 || s[1] != c || s[2] != s[3] || s[0] != d.out_channels || s[2] != d.kernel || s[0] < 1 ||
          s[2] < 1)
        throw std::invalid_argument(where(i, d) + ": weight must be [" + std::to_string(d.out_channels) + "][" +
                                    std::to_string(c) + "][" + std::to_string(d.kernel) + "][" +
                                    std::to_string(d.kernel) + "]");
      if (s[2] > h || s[2] > w) throw std::invalid_argument(where(i, d) + ": kernel larger than its input");
      L.kind = Kind::Conv;
      L.conv_index = int(conv_count_++);
      L.kernel = s[2];
      c = s[0]; h = h - s[2] + 1; w = w - s[2] + 1;
    } else if (d.type == "tanh" || d.type == "relu" || d.type == "sigmoid") {
      L.kind = Kind::Act;
      L.act = activation_from_name(d.type);
    } else if (d.type == "pool") {
      if (flat) throw std::invalid_argument(where(i, d) + ": pooling needs a C x H x W input");
      if ((d.mode != "max" && d.mode != "avg") || d.kernel < 1 || d.stride < 1 || d.kernel > h || d.kernel > w)
        throw std::invalid_argument(where(i, d) + ": needs mode max|avg and 1 <= kernel <= input, stride >= 1");
      L.kind = Kind::Pool;
      L.kernel = d.kernel; L.stride = d.stride; L.max_mode = d.mode == "max";
      h = (h - d.kernel) / d.stride + 1; w = (w - d.kernel) / d.stride + 1;
    } else if (d.type == "flatten") {
      L.kind = Kind::Flatten;
      c = c * h * w; h = w = 1; flat = true;
    } else if (d.type == "fc") {
      if (!flat) throw std::invalid_argument(where(i, d) + ": a fully connected layer needs a flat input");
      const auto& s = d.weight_shape;
      if (s.size() != 2 || s[1] != c || s[0] != d.out_features || s[0] < 1 || int64_t(d.bias.size()) != s[0])
        throw std::invalid_argument(where(i, d) + ": weight must be [" + std::to_string(d.out_features) + "][" +
                                    std::to_string(c) + "] and bias [" + std::to_string(d.out_features) + "]");
      L.kind = Kind::FC;
      c = s[0];
    } else if (d.type == "softmax") {
      L.kind = Kind::Softmax;
    } else {
      throw std::invalid_argument(where(i, d) + ": unknown layer type");
    }
    if ((d.type == "conv" || d.type == "fc") && int64_t(d.weight.size()) != shape_elems(d.weight_shape))
      throw std::invalid_argument(where(i, d) + ": weight data does not match its shape");
    L.out_c = c; L.out_h = h; L.out_w = w;
    layers.push_back(std::move(L));
  }
  if (!flat || h != 1 || w != 1) throw std::invalid_argument("network: must end in a flat class vector");
  if (conv_count_ == 0) throw std::invalid_argument("network: has no convolution layer");

  require_gpu();
  CUDA_CHECK(cudaSetDevice(device_));
  for (size_t i = 0; i < descs.size(); ++i) {
    if (!descs[i].weight.empty()) layers[i].w.upload(descs[i].weight.data(), descs[i].weight.size());
    if (!descs[i].bias.empty()) layers[i].b.upload(descs[i].bias.data(), descs[i].bias.size());
  }
  // The uploads ran on the legacy stream from pageable memory; the lanes are non-blocking streams that would not
  // wait for them.
  CUDA_CHECK(cudaDeviceSynchronize());
  layers_ = std::move(layers);
  note_peak();
}

GpuNetwork::~GpuNetwork() {
  // The members free their memory after this body: make this network's GPU current for them.
  cudaSetDevice(device_);
}

void GpuNetwork::set_fc_math(FcMath m) {
  if (m == FcMath::FP16) {
    CUDA_CHECK(cudaSetDevice(device_));
    bool converted = false;
    for (auto& L : layers_) {
      if (L.kind != Kind::FC || L.w16.size()) continue;
      const size_t rows = size_t(fc16_rows(L.out_c)), in = size_t(L.in_c);
      L.w16.resize(rows * in);
      CUDA_CHECK(cudaMemset(L.w16.get(), 0, rows * in * sizeof(__half)));
      f32_to_f16(L.w.get(), L.w16.get(), size_t(L.out_c) * in, nullptr);
      converted = true;
    }
    // on the legacy stream: the lanes' non-blocking streams would not wait for it
    if (converted) CUDA_CHECK(cudaDeviceSynchronize());
    note_peak();
  }
  fc_math_ = m;
}

size_t GpuNetwork::bytes_held() const {
  size_t n = 0;
  for (const auto& L : layers_) n += L.w.bytes() + L.b.bytes() + L.w16.bytes();
  for (const auto& L : lanes_) n += L->bytes();
  for (const auto& b : piece_scratch_) n += b.bytes();
  return n;
}

void GpuNetwork::note_peak(size_t extra) { peak_bytes_ = std::max(peak_bytes_, bytes_held() + extra); }

GpuNetwork::Plan GpuNetwork::make_plan(const std::vector<std::string>& impls) const {
  if (impls.size() != conv_count_)
    throw std::invalid_argument("network: " + std::to_string(conv_count_) + " conv layers but " +
                                std::to_string(impls.size()) + " implementations given");
  Plan plan;
  plan.max_elems = layers_.front().in_elems();  // the float32 input (when it is widened on the device)
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& L = layers_[i];
    Step st{&L};
    if (L.kind == Kind::Conv) {
      st.variant = &find_gpu_conv_variant(impls[size_t(L.conv_index)]);
      if (i == 0 && st.variant->launch_u8) plan.u8_first = true;
      if (st.variant->x_on_host) {
        if (i != 0)
          throw std::invalid_argument(std::string(st.variant->name) +
                                      " reads its input from host memory: only the network's first layer can use it "
                                      "(conv layer " + std::to_string(L.conv_index) + " is not)");
        plan.host_input = true;
      }
      if (st.variant->epilogue == Epilogue::TanhMaxPool2) {
        const bool fits = i + 2 < layers_.size() && layers_[i + 1].kind == Kind::Act &&
                          layers_[i + 1].act == Activation::Tanh && layers_[i + 2].kind == Kind::Pool &&
                          layers_[i + 2].max_mode && layers_[i + 2].kernel == 2 && layers_[i + 2].stride == 2;
        if (!fits)
          throw std::invalid_argument(std::string(st.variant->name) +
                                      " fuses tanh + max-pool 2/2 into the conv, but conv layer " +
                                      std::to_string(L.conv_index) + " is not followed by exactly those layers");
        i += 2;  // the tanh and the pool are done by the variant
      }
    } else if (L.kind == Kind::FC) {
      if (i + 1 < layers_.size() && layers_[i + 1].kind == Kind::Act) {
        st.fc_act = layers_[i + 1].act;
        ++i;
      }
    } else if (L.kind == Kind::Act && i + 1 < layers_.size() && layers_[i + 1].kind == Kind::Pool &&
               layers_[i + 1].max_mode) {
      // An activation before a max-pool runs in the pool, on each window's max (pool2d: tanh, relu and sigmoid
      // are monotonic): one pass over the conv's output instead of two, and a quarter of the activations.
      st = Step{&layers_[i + 1]};
      st.pool_act = L.act;
      ++i;
    } else if (L.kind == Kind::Flatten || L.kind == Kind::Softmax) {
      // Flatten: the buffer is already contiguous. Softmax: monotonic in each row, so it cannot change the argmax,
      // the only thing that leaves the device.
      continue;
    }
    // layers_[i] is the last layer this step covers: what it stores is that layer's output (a fused conv's
    // un-pooled output never is).
    plan.max_elems = std::max(plan.max_elems, layers_[i].out_elems());
    st.out_elems = layers_[i].out_elems();
    plan.steps.push_back(st);
  }
  plan.classes = layers_.back().out_c;
  const size_t n = plan.steps.size();
  while (plan.image_steps < n && plan.steps[plan.image_steps].layer->kind != Kind::FC) ++plan.image_steps;
  for (size_t i = 0; i + 1 < plan.image_steps; ++i)
    plan.piece_elems = std::max(plan.piece_elems, plan.steps[i].out_elems);
  if (n >= 2) {
    const Layer& a = *plan.steps[n - 2].layer;
    const Layer& b = *plan.steps[n - 1].layer;
    plan.head = a.kind == Kind::FC && b.kind == Kind::FC && plan.steps[n - 1].fc_act == Activation::None &&
                fits_head(b.in_c, b.out_c);
    // an FP16 GEMM before the head writes its padded width (fc16_rows)
    if (plan.head && fc_math_ == FcMath::FP16) plan.max_elems = std::max(plan.max_elems, fc16_rows(a.out_c));
  }
  if (fc_math_ == FcMath::FP16)
    for (size_t i = 0; i + 1 < n; ++i) {
      Step& st = plan.steps[i];
      // flatten is not a step: the next step reads this conv's output as it lies
      st.feeds_fc16 = st.layer->kind == Kind::Conv && !st.variant->x_on_host &&
                      plan.steps[i + 1].layer->kind == Kind::FC;
    }
  return plan;
}

void GpuNetwork::ensure_lanes(size_t n) {
  while (lanes_.size() < n) lanes_.push_back(std::make_unique<Lane>());
}

void GpuNetwork::size_lane(Lane& L, int64_t rows, bool u8_input, int64_t max_elems) {
  L.a.resize(size_t(rows * max_elems));
  L.b.resize(size_t(rows * max_elems));
  L.labels.resize(size_t(rows));
  if (u8_input) L.in_u8.resize(size_t(rows * C_ * H_ * W_));
}

void GpuNetwork::release_activations() noexcept {
  graph_ = GraphExec();  // it points into the buffers below
  graph_key_ = seen_key_ = GraphKey();
  pass_in_ = DeviceBuffer<uint8_t>();
  for (auto& L : lanes_) {
    L->a = DeviceBuffer<float>();
    L->b = DeviceBuffer<float>();
    L->in_u8 = DeviceBuffer<uint8_t>();
    L->labels = DeviceBuffer<int32_t>();
  }
  for (auto& b : piece_scratch_) b = DeviceBuffer<float>();
}

const float* GpuNetwork::run_lane(Lane& L, int64_t rows, const Plan& plan, Timing timing,
                                  std::vector<double>& op_seconds, std::vector<Event>* events, const float* host_x,
                                  const uint8_t* x_u8, int32_t* labels, StepSpan span, cudaStream_t stream) {
  const cudaStream_t st = stream ? stream : L.stream.get();
  if (!labels) labels = L.labels.get();
  float* cur = L.a.get();
  float* other = L.b.get();
  bool cur_half = false;  // cur holds half values (a conv's launch_f16_out)
  const size_t nsteps = plan.steps.size();
  const size_t end = std::min(span.end, nsteps);
  if (((span.row0 != 0 || stream) && end > plan.image_steps) || span.begin > plan.image_steps)
    throw std::logic_error("run_lane: only the image steps run on part of a part's rows");
  // Row r0 of a buffer holding `per_row` values per image (of type T).
  const auto at = [&](auto* p, int64_t per_row) { return p + span.row0 * per_row; };
  // Where step si's output goes in `buf` (L.a or L.b): its rows there, or -- a piece's image steps before the
  // last (span.scratch) -- the piece's own scratch in their place. Pieces run side by side on their streams and
  // each layer stores another number of values per image, so piece q's rows of one layer overlap piece p's rows
  // of another in the lane's buffers; only the last image step's output, what the FC steps read, goes there.
  const bool scratched = span.scratch[0] != nullptr;
  const auto out_at = [&](float* buf, int64_t per_row, size_t si) -> float* {
    if (!scratched || si + 1 >= plan.image_steps) return at(buf, per_row);
    return buf == L.a.get() ? span.scratch[0] : span.scratch[1];
  };
  // Where step si's input lies: step si - 1's output (the first step's: the part's own rows).
  const auto in_at = [&](float* buf, int64_t per_row, size_t si) {
    return si ? out_at(buf, per_row, si - 1) : at(buf, per_row);
  };
  for (size_t si = 0; si < end; ++si) {
    const Step& step = plan.steps[si];
    const Layer& ly = *step.layer;
    // The steps before span.begin ran in another call: only where they left their output is followed here.
    const bool run = si >= span.begin;
    switch (ly.kind) {
      case Kind::Conv: {
        const bool u8 = x_u8 && &ly == &layers_.front();  // the raw images, widened inside the kernel
        // the output in half where it feeds an FP16 FC layer and the variant can write it so on this input
        const bool half_out = step.feeds_fc16 && (u8 ? step.variant->launch_u8_f16_out != nullptr
                                                     : step.variant->launch_f16_out != nullptr);
        if (!run) {
          std::swap(cur, other);
          cur_half = half_out;
          break;
        }
        const ConvShape s = make_conv_shape(rows, ly.in_c, ly.in_h, ly.in_w, ly.out_c, ly.in_c, ly.kernel, ly.kernel);
        const std::string why = why_unsupported(*step.variant, s);
        if (!why.empty()) throw std::invalid_argument(why);
        const float* x = step.variant->x_on_host ? host_x : in_at(cur, ly.in_elems(), si);
        const int ci = ly.conv_index;
        float* y = out_at(other, step.out_elems, si);
        // half output only into an FC layer: the last image step, never in a scratch
        __half* y16 = at(reinterpret_cast<__half*>(other), step.out_elems);
        const auto launch = [&] {
          if (u8 && half_out)
            step.variant->launch_u8_f16_out(x_u8, ly.w.get(), y16, s, st);
          else if (u8)
            step.variant->launch_u8(x_u8, ly.w.get(), y, s, st);
          else if (half_out)
            step.variant->launch_f16_out(x, ly.w.get(), y16, s, st);
          else
            step.variant->launch(x, ly.w.get(), y, s, st);
        };
        if (timing == Timing::HostSync) {
          // The course's Op Time: everything before is finished, the clock brackets this launch alone.
          CUDA_CHECK(cudaDeviceSynchronize());
          const auto t0 = std::chrono::steady_clock::now();
          launch();
          CUDA_CHECK(cudaDeviceSynchronize());
          const auto t1 = std::chrono::steady_clock::now();
          op_seconds[size_t(ci)] += std::chrono::duration<double>(t1 - t0).count();
        } else if (timing == Timing::Events) {
          (*events)[2 * size_t(ci)].record(st);
          launch();
          (*events)[2 * size_t(ci) + 1].record(st);
        } else {
          launch();
        }
        std::swap(cur, other);
        cur_half = half_out;
        break;
      }
      case Kind::Act:
        if (run) {
          float* x = in_at(cur, ly.in_elems(), si);
          const size_t n = size_t(rows * ly.in_elems());
          activation_inplace(x, n, ly.act, st);
          // the last image step of a piece: from its scratch into the lane's rows the FC steps read
          float* fin = out_at(cur, ly.in_elems(), si);
          if (fin != x) CUDA_CHECK(cudaMemcpyAsync(fin, x, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        }
        break;
      case Kind::Pool:
        if (run)
          pool2d(in_at(cur, ly.in_elems(), si), out_at(other, ly.out_elems(), si), rows * ly.in_c, int(ly.in_h),
                 int(ly.in_w), int(ly.kernel), int(ly.stride), ly.max_mode, st, step.pool_act);
        std::swap(cur, other);
        break;
      case Kind::FC:
        if (plan.head && si + 1 == nsteps) {
          const Step& prev = plan.steps[si - 1];
          const int64_t ldh = fc_math_ == FcMath::FP16 ? fc16_rows(ly.in_c) : ly.in_c;
          fc_head(cur, ldh, prev.layer->b.get(), prev.fc_act, ly.w.get(), ly.b.get(), other, labels, rows,
                  ly.in_c, ly.out_c, st);
        } else if (fc_math_ == FcMath::FP16) {
          // half input: as the conv before wrote it, or rounded here into `other` (the GEMM then writes into cur,
          // whose float32 input it no longer needs)
          const __half* x16 = reinterpret_cast<const __half*>(cur);
          float* y = other;
          if (!cur_half) {
            f32_to_f16(cur, reinterpret_cast<__half*>(other), size_t(rows * ly.in_c), st);
            x16 = reinterpret_cast<const __half*>(other);
            y = cur;
          }
          if (plan.head && si + 2 == nsteps)  // every padded column: the head reads the first out_c of each row
            fc_gemm_f16(L.blas.get(), x16, ly.w16.get(), y, rows, ly.in_c, fc16_rows(ly.out_c), fc16_rows(ly.out_c),
                        st);
          else
            fully_connected_f16(L.blas.get(), x16, ly.w16.get(), ly.b.get(), y, rows, ly.in_c, ly.out_c, step.fc_act,
                                st);
          cur_half = false;
          if (y == cur) break;  // the output is in cur already
        } else if (plan.head && si + 2 == nsteps) {  // bias and activation follow in the head
          fc_gemm(L.blas.get(), cur, ly.w.get(), other, rows, ly.in_c, ly.out_c, fc_math_, st);
        } else {
          fully_connected(L.blas.get(), cur, ly.w.get(), ly.b.get(), other, rows, ly.in_c, ly.out_c, step.fc_act,
                          fc_math_, st);
        }
        std::swap(cur, other);
        break;
      case Kind::Flatten:
      case Kind::Softmax:
        break;
    }
  }
  if (!plan.head && end == nsteps) argmax_rows(cur, labels, rows, plan.classes, st);
  return cur;
}

GpuNetwork::StagedInput GpuNetwork::stage_input(Lane& L, const Plan& plan, const uint8_t* images, InputType type,
                                                int64_t rows, bool on_device, const float* host_x) {
  if (plan.host_input) return {host_x, nullptr};
  const cudaStream_t st = L.stream.get();
  const size_t elems = size_t(rows * C_ * H_ * W_);
  if (type == InputType::F32) {
    CUDA_CHECK(cudaMemcpyAsync(L.a.get(), images, elems * sizeof(float),
                               on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, st));
    return {};
  }
  const uint8_t* u8 = images;
  if (!on_device) {
    CUDA_CHECK(cudaMemcpyAsync(L.in_u8.get(), images, elems, cudaMemcpyHostToDevice, st));
    u8 = L.in_u8.get();
  }
  if (plan.u8_first) return {nullptr, u8};
  u8_to_f32(u8, L.a.get(), elems, st);
  return {};
}

const float* GpuNetwork::stage_host_input(const void* images, InputType type, int64_t rows) {
  const size_t elems = size_t(rows * C_ * H_ * W_);
  staging_f32_.resize(elems);
  if (type == InputType::U8) {
    const uint8_t* p = static_cast<const uint8_t*>(images);
    std::transform(p, p + elems, staging_f32_.get(), [](uint8_t v) { return float(v); });
  } else {
    std::memcpy(staging_f32_.get(), images, elems * sizeof(float));
  }
  return staging_f32_.get();
}

namespace {
// True when p is page-locked host memory (cudaHostAlloc'd or registered): copies from it can run asynchronously.
bool is_pinned(const void* p) {
  cudaPointerAttributes attr{};
  const bool ok = cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
  cudaGetLastError();  // pageable memory may report an error on older runtimes: not a failure
  return ok;
}
constexpr double kMaxTaper = 4;
constexpr int64_t kMinPieceRows = 128;
void check_taper(double taper, const char* what) {
  if (!(taper > 0 && taper <= kMaxTaper))  // NaN fails too
    throw std::invalid_argument(std::string(what) + ": taper must be in (0, 4]");
}
}  // namespace

std::vector<int64_t> GpuNetwork::chunk_starts(int64_t rows, int chunks, double taper) {
  if (rows < 1 || chunks < 1) throw std::invalid_argument("chunk_starts: rows and chunks must be >= 1");
  check_taper(taper, "chunk_starts");
  const int64_t parts = std::min<int64_t>(chunks, rows);
  // Part i holds taper^i times the first part's images: part i ends at rows * (taper^0 + ... + taper^i) divided by
  // the sum over all parts, rounded; every part keeps at least one image.
  double total = 0;
  for (int64_t i = 0; i < parts; ++i) total += std::pow(taper, double(i));
  std::vector<int64_t> at{0};
  double share = 0;
  for (int64_t i = 0; i < parts; ++i) {
    share += std::pow(taper, double(i));
    const int64_t end = i + 1 == parts ? rows : std::llround(double(rows) * share / total);
    at.push_back(std::clamp(end, at.back() + 1, rows - (parts - 1 - i)));
  }
  return at;
}

GpuNetwork::GraphKey GpuNetwork::graph_key(const Chunking& ck, const uint8_t* src, bool on_device, InputType type,
                                           const Plan& plan, const int32_t* labels_dst) const {
  GraphKey k;
  k.sizes = {int64_t(ck.nlanes), int64_t(type), int64_t(fc_math_), int64_t(ck.timing), int64_t(on_device)};
  k.sizes.insert(k.sizes.end(), ck.at.begin(), ck.at.end());
  k.sizes.push_back(-1);
  k.sizes.insert(k.sizes.end(), ck.piece_at.begin(), ck.piece_at.end());
  k.ptrs = {src, labels_dst, pass_in_.get(), piece_scratch_[0].get(), piece_scratch_[1].get()};
  for (const Step& st : plan.steps) k.ptrs.push_back(st.variant);
  for (size_t l = 0; l < ck.nlanes; ++l) {
    const Lane& L = *lanes_[l];
    k.ptrs.insert(k.ptrs.end(), {L.a.get(), L.b.get(), L.labels.get()});
  }
  return k;
}

GpuNetwork::Chunking GpuNetwork::prepare_chunks(int64_t rows, int chunks, int streams, double taper,
                                                size_t in_bytes, const Plan& plan, Timing timing, int tail_pieces) {
  Chunking ck{chunk_starts(rows, chunks, taper), {}, 0, 0, in_bytes, timing};
  ck.nchunks = int64_t(ck.at.size()) - 1;
  ck.piece_at.assign(ck.at.begin(), ck.at.end() - 1);
  {
    // The last part's pieces: equal, each at least kMinPieceRows images (a smaller one costs its launches more
    // than its copy hides).
    const int64_t r0 = ck.at[size_t(ck.nchunks) - 1], rc = rows - r0;
    const int64_t pieces = std::clamp<int64_t>(std::min<int64_t>(tail_pieces, rc / kMinPieceRows), 1, rc);
    for (int64_t p = 1; p < pieces; ++p) ck.piece_at.push_back(r0 + rc * p / pieces);
    ck.piece_at.push_back(rows);
  }
  ck.nlanes = size_t(std::min<int64_t>(streams, ck.nchunks));
  int64_t chunk_rows = 0;
  for (int64_t c = 0; c < ck.nchunks; ++c) chunk_rows = std::max(chunk_rows, ck.at[size_t(c) + 1] - ck.at[size_t(c)]);
  ensure_lanes(ck.nlanes);
  if (!copy_stream_) copy_stream_.emplace();
  if (!pass_stream_) pass_stream_.emplace();
  for (size_t l = 0; l < ck.nlanes; ++l) size_lane(*lanes_[l], chunk_rows, false, plan.max_elems);
  if (ck.piece_at.size() > size_t(ck.nchunks) + 1) {  // the last part in pieces
    const int64_t rc = rows - ck.at[size_t(ck.nchunks) - 1];
    for (auto& b : piece_scratch_) b.resize(size_t(rc * plan.piece_elems));
  }
  // Events are kept between calls: creating them here would put host calls before the first copy is queued.
  const size_t npieces = ck.piece_at.size() - 1;
  if (chunk_events_.size() < npieces) chunk_events_.resize(npieces);
  for (auto& ev : chunk_events_)
    while (ev.size() < 2 * conv_count_) ev.emplace_back();
  while (copied_.size() < npieces) copied_.emplace_back(cudaEventDisableTiming);
  while (forked_.size() < npieces) forked_.emplace_back(cudaEventDisableTiming);
  while (pieced_.size() < npieces) pieced_.emplace_back(cudaEventDisableTiming);
  while (piece_streams_.size() < npieces - size_t(ck.nchunks) + 1) piece_streams_.emplace_back();
  while (joined_.size() < ck.nlanes) joined_.emplace_back(cudaEventDisableTiming);
  return ck;
}

void GpuNetwork::queue_copy(const Chunking& ck, size_t piece, const uint8_t* src, const uint8_t* pageable) {
  const cudaStream_t cs = copy_stream_->get();
  const int64_t r0 = ck.piece_at[piece], rc = ck.piece_at[piece + 1] - r0;
  const size_t off = size_t(r0) * ck.in_bytes, bytes = size_t(rc) * ck.in_bytes;
  // Pageable images: this piece is copied into pinned staging just before its upload is queued, so the host
  // copy of piece i+1 overlaps the GPU's work on piece i (measured on an H200: a whole-batch host copy first
  // cost ~3 ms of the sp19 model's ~5 ms).
  if (pageable) std::memcpy(staging_.get() + off, pageable + off, bytes);
  CUDA_CHECK(cudaMemcpyAsync(pass_in_.get() + off, src + off, bytes, cudaMemcpyHostToDevice, cs));
  CUDA_CHECK(cudaEventRecord(copied_[piece].get(), cs));
}

void GpuNetwork::queue_chunks(const Chunking& ck, const uint8_t* src, const uint8_t* pageable, bool on_device,
                              InputType type, const Plan& plan, int32_t* labels_dst, cudaStream_t origin) {
  // Every lane starts after the origin's earlier work (in a capture: the lanes join it here).
  for (size_t l = 0; l < ck.nlanes; ++l) joined_[l].order(origin, lanes_[l]->stream.get());
  const size_t npieces = ck.piece_at.size() - 1;
  const auto copy = [&](size_t c) { queue_copy(ck, c, src, pageable); };
  // Pinned images were copied before this (run_pass, queue_copy, outside a capture): in a capture a wait for one
  // of those copies becomes an external event-wait node, which waits for the copy the host queued before each
  // replay.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(origin, &capturing));
  const unsigned wait_flags =
      capturing == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : cudaEventWaitDefault;
  // The last part's labels go straight from its last kernel into pinned host memory where the device can address
  // it (mapped: every pinned allocation under unified addressing), instead of a device-to-host copy after it: that
  // copy is on the pass's critical path (on an H200 it started 8 us after the head kernel it waited for had ended
  // and took 1.7 us more: pinned_trace in results/bench-e2e-nvidia-h200-2026-11-24-sp19-taper-sweep.json). The
  // parts before it write theirs on the device and copy them back after: their heads run while the images still
  // stream in, and the head's small writes across PCIe, beside the copy engine's reads, doubled its time (sp19's
  // head on a 2500-row part: 12.7 and 12.6 us for the first two parts against 6.6 for the last, pinned_trace in
  // results/bench-e2e-nvidia-h200-2026-11-25-sp19-copies-first.json; 6.0 and 5.8 when they wrote on the device,
  // results/bench-e2e-nvidia-h200-2026-11-29-sp19-labels.json; the third part's, beside the last part's first
  // piece, took 13.7 and 14.5).
  int32_t* labels_mapped = nullptr;
  if (labels_dst && cudaHostGetDevicePointer(reinterpret_cast<void**>(&labels_mapped), labels_dst, 0) != cudaSuccess) {
    cudaGetLastError();  // not mapped: copied after each part below
    labels_mapped = nullptr;
  }
  std::vector<double> unused;
  size_t p = 0;  // the next piece
  for (int64_t c = 0; c < ck.nchunks; ++c) {
    Lane& L = *lanes_[size_t(c) % ck.nlanes];
    const cudaStream_t st = L.stream.get();
    const int64_t r0 = ck.at[size_t(c)], rc = ck.at[size_t(c) + 1] - r0;
    const uint8_t* part = (on_device ? src : pass_in_.get()) + size_t(r0) * ck.in_bytes;
    int32_t* labels = labels_mapped && c + 1 == ck.nchunks ? labels_mapped + r0 : nullptr;  // null: L.labels
    const size_t first = p;
    while (p < npieces && ck.piece_at[p] < r0 + rc) ++p;
    if (p - first > 1) {
      // A part in pieces (prepare_chunks only splits where the first conv reads the uint8 images on the device):
      // the image steps of each piece on a stream of its own, from when its copy has landed (not after the piece
      // before: in one stream the last piece's first conv waited for the conv before it); the FC steps on the
      // whole part, in the lane, after every piece. The pieces write disjoint rows of the lane's buffers, after
      // the lane's earlier work (its part before, in a pass of more parts than lanes).
      for (size_t q = first; q < p; ++q) {
        const cudaStream_t ps = piece_streams_[q - first].get();
        if (pageable) copy(q);
        forked_[q].order(st, ps);
        CUDA_CHECK(cudaStreamWaitEvent(ps, copied_[q].get(), wait_flags));
        const int64_t q0 = ck.piece_at[q], qc = ck.piece_at[q + 1] - q0;
        StepSpan span{0, plan.image_steps, q0 - r0};
        for (int i = 0; i < 2; ++i) span.scratch[i] = piece_scratch_[i].get() + (q0 - r0) * plan.piece_elems;
        run_lane(L, qc, plan, ck.timing, unused, &chunk_events_[q], nullptr,
                 pass_in_.get() + size_t(q0) * ck.in_bytes, nullptr, span, ps);
      }
      // joined after every fork: a fork recorded on the lane after a join would wait for that piece
      for (size_t q = first; q < p; ++q) pieced_[q].order(piece_streams_[q - first].get(), st);
      run_lane(L, rc, plan, ck.timing, unused, nullptr, nullptr, part, labels, {plan.image_steps, SIZE_MAX, 0});
    } else {
      if (pageable) copy(first);
      if (!on_device) CUDA_CHECK(cudaStreamWaitEvent(st, copied_[first].get(), wait_flags));
      const StagedInput in = stage_input(L, plan, part, type, rc, true, nullptr);
      run_lane(L, rc, plan, ck.timing, unused, &chunk_events_[first], in.host_x, in.x_u8, labels);
    }
    if (labels_dst && !labels)
      CUDA_CHECK(cudaMemcpyAsync(labels_dst + r0, L.labels.get(), size_t(rc) * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, st));
  }
  for (size_t l = 0; l < ck.nlanes; ++l) joined_[l].order(lanes_[l]->stream.get(), origin);
}

bool GpuNetwork::launch_chunks(cudaStream_t cs, GraphKey* key, const std::function<void()>& queue) {
  if (!key) {
    queue();
    return false;
  }
  if (!(graph_ && *key == graph_key_) && *key == seen_key_ && !graph_refused_) {
    // The second time this pass comes: capture it. Thread-local mode: an allocation or a synchronisation inside
    // a variant fails the capture instead of running, and the pass then runs without a graph.
    graph_ = GraphExec();
    CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t g = nullptr;
    try {
      queue();
    } catch (const CudaError&) {
      graph_refused_ = true;
    } catch (...) {
      cudaStreamEndCapture(cs, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    const cudaError_t end = cudaStreamEndCapture(cs, &g);
    if (end != cudaSuccess || !g) graph_refused_ = true;
    if (!graph_refused_) {
      try {
        graph_ = GraphExec(g);
        graph_key_ = *key;
      } catch (const CudaError&) {
        graph_refused_ = true;
      }
    }
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();  // a refused capture leaves its error behind; the pass runs below without a graph
  }
  if (graph_ && *key == graph_key_) {
    graph_.launch(cs);
    return true;
  }
  if (*key != seen_key_) {
    seen_key_ = std::move(*key);
    graph_refused_ = false;
  }
  queue();
  return false;
}

bool GpuNetwork::capturable(const Plan& plan) {
  return std::all_of(plan.steps.begin(), plan.steps.end(),
                     [](const Step& st) { return !st.variant || st.variant->graph_capturable; });
}

bool GpuNetwork::run_pass(const uint8_t* images, InputType type, int64_t rows, const Plan& plan, int chunks,
                          int streams, double taper, int tail_pieces, bool op_times, int32_t* labels_out,
                          std::vector<double>& op_seconds, double* gpu_ms) {
  if (gpu_ms && !span_start_) {
    span_start_.emplace();
    span_end_.emplace();
  }
  const int64_t in_elems = C_ * H_ * W_;
  const size_t in_bytes = size_t(in_elems) * (type == InputType::U8 ? 1 : sizeof(float));
  if (std::min<int64_t>(chunks, rows) == 1 || plan.host_input) {
    // One launch per layer, timed as the course did (or a host-input variant, which streams the images itself).
    ensure_lanes(1);
    Lane& L = *lanes_[0];
    const bool u8_on_device = type == InputType::U8 && !plan.host_input;
    size_lane(L, rows, u8_on_device, plan.max_elems);
    note_peak();
    const float* host_x = plan.host_input ? stage_host_input(images, type, rows) : nullptr;
    if (gpu_ms) span_start_->record(L.stream.get());
    const StagedInput in = stage_input(L, plan, images, type, rows, false, host_x);
    run_lane(L, rows, plan, op_times ? Timing::HostSync : Timing::None, op_seconds, nullptr, in.host_x, in.x_u8);
    CUDA_CHECK(cudaMemcpyAsync(labels_out, L.labels.get(), size_t(rows) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               L.stream.get()));
    if (gpu_ms) span_end_->record(L.stream.get());
    CUDA_CHECK(cudaStreamSynchronize(L.stream.get()));
    if (gpu_ms) *gpu_ms += double(span_end_->since(*span_start_));
    return false;
  }
  // Pieces only where the first conv reads each piece's uint8 images where they land (nothing to stage).
  const Chunking ck = prepare_chunks(rows, chunks, streams, taper, in_bytes, plan,
                                     op_times ? Timing::Events : Timing::None,
                                     type == InputType::U8 && plan.u8_first ? tail_pieces : 1);
  pass_in_.resize(size_t(rows) * in_bytes);
  labels_host_.resize(size_t(rows));
  note_peak();
  // Images already in pinned memory are read in place; pageable ones go through pinned staging, part by part.
  const bool pinned = is_pinned(images);
  if (!pinned) staging_.resize(size_t(rows) * in_bytes);
  const uint8_t* src = pinned ? images : staging_.get();
  // From pinned memory every copy is queued first, before the compute and outside its graph: the copy engine then
  // runs the whole batch back to back from the start of the call while the host launches the compute (a graph of
  // sp19's chunked pass takes the host tens of microseconds to launch; in the graph, the first copy waited for
  // that). The compute starts from a stream of its own, each part waiting for its copy's event. sp19 on an H200:
  // the first copy 42 us after the call's start before, 26 after (pinned_trace in results/
  // bench-e2e-nvidia-h200-2026-11-25-sp19-piece-scratch-sized.json, -sp19-copies-first.json: CUPTI slows the
  // host calls), the pinned pass 0.520 ms before, 0.514 after (the GPU's compute after the last copy is most of
  // what remains).
  // Tried and dropped: the last piece's first conv reading its images in place from the pinned batch (mapped), with
  // no copy, so that its compute would overlap its transfer (a probe of the sp19 pass, H200, host-timed calls in
  // interleaved rounds, labels equal): 0.552 ms starting when the piece before has landed, 0.539 from the start,
  // against 0.517 with the copy. Reading across PCIe the conv took 63 us for what the copy engine moves in 55, and
  // the conv after it slowed beside it.
  // Also tried and dropped for the tail after the last copy (probes of the sp19 pass, H200, host-timed calls in
  // interleaved rounds, medians of 60-80 calls each, labels equal):
  // - stream priorities, the later parts' lanes and the pieces' streams first, the graph instantiated with its
  //   nodes' priorities (cudaGraphInstantiateFlagUseNodePriority): 0.536 ms against 0.532. The persistent convs
  //   (steps 23 and 24) hold every SM until their images are done, so a later piece cannot start earlier; launched
  //   with one image per block so that it could (priorities on), 0.558 (two images per block 0.536) against 0.522;
  // - parts and pieces in whole waves of those grids (step 24: 528 images, step 23: 396 on 132 SMs), last pieces
  //   of 396 to 1188 images: 0.529-0.557 against 0.534;
  // - the last images as whole-network parts on lanes of their own, in shrinking sizes (6 to 9 parts, the last of
  //   250-792 images): 0.526-0.570 against 0.522.
  // After the last copy the GPU works off the parts before it as well as the last one; what remains is compute per
  // image.
  // The span starts where the copies queue (copy_stream_ is also the origin of a pageable pass).
  if (gpu_ms) span_start_->record(copy_stream_->get());
  if (pinned)
    for (size_t p = 0; p + 1 < ck.piece_at.size(); ++p) queue_copy(ck, p, src, nullptr);
  const cudaStream_t origin = pinned ? pass_stream_->get() : copy_stream_->get();
  GraphKey key = graph_key(ck, src, false, type, plan, labels_host_.get());
  const bool replayed = launch_chunks(origin, pinned && capturable(plan) ? &key : nullptr, [&] {
    queue_chunks(ck, src, pinned ? nullptr : images, false, type, plan, labels_host_.get(), origin);
  });
  if (gpu_ms) span_end_->record(origin);
  // every lane is joined into the origin, and each waited for its copies
  CUDA_CHECK(cudaStreamSynchronize(origin));
  if (gpu_ms) *gpu_ms += double(span_end_->since(*span_start_));
  for (size_t c = 0; c + 1 < ck.piece_at.size() && op_times; ++c) {
    const std::vector<Event>& ev = chunk_events_[c];
    for (size_t ci = 0; ci < conv_count_; ++ci) op_seconds[ci] += double(ev[2 * ci + 1].since(ev[2 * ci])) / 1e3;
  }
  std::memcpy(labels_out, labels_host_.get(), size_t(rows) * sizeof(int32_t));
  return replayed;
}

ForwardResult GpuNetwork::forward(const void* images, InputType type, int64_t n, int32_t* labels,
                                  const std::vector<std::string>& impls, int chunks, int streams, bool op_times,
                                  double taper, int tail_pieces, bool gpu_span) {
  if (n < 1) throw std::invalid_argument("forward: need at least one image");
  if (chunks < 1 || streams < 1) throw std::invalid_argument("forward: chunks and streams must be >= 1");
  check_taper(taper, "forward");
  if (tail_pieces < 1 || tail_pieces > kMaxTailPieces)
    throw std::invalid_argument("forward: tail_pieces must be in 1.." + std::to_string(kMaxTailPieces));
  CUDA_CHECK(cudaSetDevice(device_));
  if (!plan_ || impls != plan_impls_ || fc_math_ != plan_fc_math_) {
    plan_.reset();
    plan_ = make_plan(impls);
    plan_impls_ = impls;
    plan_fc_math_ = fc_math_;
  }
  const Plan& plan = *plan_;
  const size_t in_bytes = size_t(C_ * H_ * W_) * (type == InputType::U8 ? 1 : sizeof(float));
  const uint8_t* img = static_cast<const uint8_t*>(images);

  ForwardResult r;
  r.op_seconds.assign(conv_count_, 0.0);
  int64_t pass_rows = n, done = 0;
  while (done < n) {
    const int64_t rows = std::min(pass_rows, n - done);
    std::vector<double> pass_seconds(conv_count_, 0.0);  // kept only if the pass completes
    double pass_gpu_ms = 0;
    bool replayed = false;
    try {
      replayed = run_pass(img + size_t(done) * in_bytes, type, rows, plan, chunks, streams, taper, tail_pieces,
                          op_times, labels + done, pass_seconds, gpu_span ? &pass_gpu_ms : nullptr);
    } catch (const CudaError& e) {
      if (e.code != cudaErrorMemoryAllocation) throw;
      // Let queued work finish before its buffers go, then retry this part of the batch in halves.
      for (auto& L : lanes_) cudaStreamSynchronize(L->stream.get());
      for (auto& ps : piece_streams_) cudaStreamSynchronize(ps.get());
      if (copy_stream_) cudaStreamSynchronize(copy_stream_->get());
      if (pass_stream_) cudaStreamSynchronize(pass_stream_->get());
      release_activations();
      if (rows == 1) throw;
      pass_rows = (rows + 1) / 2;
      continue;
    }
    for (size_t i = 0; i < conv_count_; ++i) r.op_seconds[i] += pass_seconds[i];
    r.gpu_ms += pass_gpu_ms;
    r.replayed = (r.passes == 0 || r.replayed) && replayed;
    done += rows;
    ++r.passes;
    r.rows_per_pass = std::max(r.rows_per_pass, rows);
  }
  r.peak_bytes = peak_bytes_;
  if (!op_times) r.op_seconds.clear();
  return r;
}

std::vector<float> GpuNetwork::forward_resident(const void* images, InputType type, int64_t n,
                                                const std::vector<std::string>& impls, int warmup, int reps,
                                                int chunks, int streams, double taper) {
  if (n < 1 || warmup < 0 || reps < 1) throw std::invalid_argument("forward_resident: need n >= 1, reps >= 1");
  if (chunks < 1 || streams < 1) throw std::invalid_argument("forward_resident: chunks and streams must be >= 1");
  check_taper(taper, "forward_resident");
  CUDA_CHECK(cudaSetDevice(device_));
  const Plan plan = make_plan(impls);
  if (plan.host_input)
    throw std::invalid_argument("forward_resident keeps the images on the device; the first conv's variant reads "
                                "them from host memory");
  const int64_t in_elems = C_ * H_ * W_;
  const size_t in_bytes = size_t(in_elems) * (type == InputType::U8 ? 1 : sizeof(float));
  std::vector<float> ms;
  Event start, stop;
  if (std::min<int64_t>(chunks, n) == 1) {
    ensure_lanes(1);
    Lane& L = *lanes_[0];
    size_lane(L, n, false, plan.max_elems);
    DeviceBuffer<uint8_t> resident(size_t(n) * in_bytes);
    note_peak(resident.bytes());
    const cudaStream_t st = L.stream.get();
    CUDA_CHECK(cudaMemcpyAsync(resident.get(), images, size_t(n) * in_bytes, cudaMemcpyHostToDevice, st));
    std::vector<double> unused(conv_count_, 0.0);
    for (int i = 0; i < warmup + reps; ++i) {
      start.record(st);
      const StagedInput in = stage_input(L, plan, resident.get(), type, n, true, nullptr);
      run_lane(L, n, plan, Timing::None, unused, nullptr, in.host_x, in.x_u8);
      stop.record(st);
      const float t = stop.since(start);
      if (i >= warmup) ms.push_back(t);
    }
    return ms;
  }
  // The chunked pass of forward without its copies: the parts compute on the lanes side by side, a replayed graph
  // from the second rep on (as from pinned memory).
  const Chunking ck = prepare_chunks(n, chunks, streams, taper, in_bytes, plan, Timing::None);
  DeviceBuffer<uint8_t> resident(size_t(n) * in_bytes);
  note_peak(resident.bytes());
  const cudaStream_t cs = copy_stream_->get();
  CUDA_CHECK(cudaMemcpyAsync(resident.get(), images, size_t(n) * in_bytes, cudaMemcpyHostToDevice, cs));
  GraphKey key = graph_key(ck, resident.get(), true, type, plan, nullptr);
  const bool graph = capturable(plan);
  for (int i = 0; i < warmup + reps; ++i) {
    start.record(cs);
    GraphKey k = key;
    launch_chunks(cs, graph ? &k : nullptr,
                  [&] { queue_chunks(ck, resident.get(), nullptr, true, type, plan, nullptr, cs); });
    stop.record(cs);
    const float t = stop.since(start);
    if (i >= warmup) ms.push_back(t);
  }
  return ms;
}

std::vector<float> GpuNetwork::logits(const void* images, InputType type, int64_t n,
                                     const std::vector<std::string>& impls) {
  if (n < 1) throw std::invalid_argument("logits: need at least one image");
  CUDA_CHECK(cudaSetDevice(device_));
  const Plan plan = make_plan(impls);
  ensure_lanes(1);
  Lane& L = *lanes_[0];
  size_lane(L, n, type == InputType::U8, plan.max_elems);
  note_peak();
  const cudaStream_t st = L.stream.get();
  const float* host_x = plan.host_input ? stage_host_input(images, type, n) : nullptr;
  const StagedInput in = stage_input(L, plan, static_cast<const uint8_t*>(images), type, n, false, host_x);
  std::vector<double> unused(conv_count_, 0.0);
  const float* last = run_lane(L, n, plan, Timing::None, unused, nullptr, in.host_x, in.x_u8);
  std::vector<float> out(size_t(n * plan.classes));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), last, out.size() * sizeof(float), cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  return out;
}

}  // namespace pyconv
