// What every convolution variant says about itself, CPU or GPU: its roles in the course's milestones, its
// arithmetic, its tolerance, and the self-registering registry that collects the descriptors.
//
// A variant file ends with PYCONV_REGISTER_GPU_CONV(GpuConvVariant{...}) or PYCONV_REGISTER_CPU_CONV(...): a
// static object whose constructor adds the descriptor when the module is loaded. The registry keeps ladder
// order (by step) and records what is wrong with a descriptor (a duplicate name or step, a missing field, a
// role without its reason) instead of throwing from a static constructor; the module's init function calls
// check() first, so a bad variant file makes `import pyconv._gpu` fail with an ImportError naming the file.
#pragma once
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace pyconv {

// A variant's part in one milestone.
enum class Role {
  Never,      // refused with its reason, even when named with --impl
  OnRequest,  // runs only when named with --impl
  Candidate,  // the milestone may choose it (milestone 4: by the plan's rule; final: by measurement)
  Default,    // the milestone runs it when no --impl is given
};

struct MilestoneRole {
  Role role = Role::Never;
  const char* reason = "";  // required for Never and OnRequest: why not chosen (shown to the user)
};
constexpr MilestoneRole default_role() { return {Role::Default, ""}; }
constexpr MilestoneRole candidate() { return {Role::Candidate, ""}; }
constexpr MilestoneRole on_request(const char* why) { return {Role::OnRequest, why}; }
constexpr MilestoneRole never(const char* why) { return {Role::Never, why}; }

// What the variant writes to y.
enum class Epilogue {
  None,          // y[B][M][Ho][Wo] = conv(x, k)
  TanhMaxPool2,  // y[B][M][Ho/2][Wo/2] = maxpool2x2/2(tanh(conv(x, k))) -- the layer never stores un-pooled
};

// How the variant multiplies. Tf32 and F16 are reduced precision: one tensor-core pass on operands rounded to
// TF32 or to FP16 (both keep 11 significant bits; FP16's range ends at 65504, beyond which a value overflows),
// products summed in float32. They set a looser rtol, report "tf32" / "fp16", and final uses them only when the
// end-to-end bench's label verdict allows reduced precision. Tf32x3 (each operand split into two TF32 parts, three
// MMAs per product) and F16x3 (each operand split into two FP16 parts, three MMAs per product:
// cuda/runtime/mma_f16.cuh) are as accurate as float32 FFMA: they are held to float32's tolerance and count as
// float32 wherever precision is decided.
enum class Precision {
  Fp32,
  Tf32,    // one TF32 pass: reduced precision
  Tf32x3,  // counts as float32
  F16x3,   // counts as float32
  F16,     // one FP16 pass: reduced precision like Tf32
};

// The relative tolerance every variant is held to unless it says otherwise (rtol = 0 in its descriptor).
constexpr double kDefaultRtol = 1e-4;

inline const char* role_name(Role r) {
  switch (r) {
    case Role::Default: return "default";
    case Role::Candidate: return "candidate";
    case Role::OnRequest: return "on-request";
    case Role::Never: break;
  }
  return "never";
}
inline const char* epilogue_name(Epilogue e) { return e == Epilogue::TanhMaxPool2 ? "tanh-maxpool2" : "none"; }
inline const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Tf32: return "tf32";
    case Precision::F16: return "fp16";
    case Precision::Fp32:
    case Precision::Tf32x3:
    case Precision::F16x3: break;  // as accurate as float32
  }
  return "fp32";
}

// Descriptors of one kind (CPU or GPU), in ladder order. V has name, step, summary, rtol and a
// `const char* source` the registrar fills with the registering file.
template <typename V>
class VariantRegistry {
 public:
  explicit VariantRegistry(const char* kind) : kind_(kind) {}

  // Called from static constructors: never throws, records problems for check().
  void add(V v, const char* file) noexcept {
    try {
      v.source = file;
      const std::string where = std::string(" (") + file + ")";
      if (!v.name || !*v.name) return fail("a " + kind_ + " variant without a name" + where);
      const std::string name = v.name;
      if (v.step < 0) return fail(name + ": step must be >= 0" + where);
      if (!v.summary || !*v.summary) return fail(name + ": no summary" + where);
      if (v.rtol < 0) return fail(name + ": rtol must be >= 0 (0: the default)" + where);
      const std::string why = v.incomplete();
      if (!why.empty()) return fail(name + ": " + why + where);
      for (const V& o : all_) {
        if (name == o.name)
          return fail("two " + kind_ + " variants named '" + name + "' (" + o.source + ", " + file + ")");
        if (v.step == o.step)
          return fail(kind_ + " variants '" + o.name + "' and '" + name + "' both claim step " +
                      std::to_string(v.step) + " (" + o.source + ", " + file + ")");
      }
      all_.insert(std::upper_bound(all_.begin(), all_.end(), v,
                                   [](const V& a, const V& b) { return a.step < b.step; }),
                  v);
    } catch (...) {
      errors_.push_back("out of memory while registering a " + kind_ + " variant");
    }
  }

  // Throws std::runtime_error listing every problem found while loading (module init turns it into ImportError).
  void check() const {
    if (errors_.empty()) return;
    std::string msg = "invalid " + kind_ + " variant registry: ";
    for (size_t i = 0; i < errors_.size(); ++i) msg += (i ? "; " : "") + errors_[i];
    throw std::runtime_error(msg);
  }

  const std::vector<V>& all() const { return all_; }

  const V& find(const std::string& name) const {  // throws std::invalid_argument
    std::string known;
    for (const V& v : all_) {
      if (name == v.name) return v;
      known += (known.empty() ? "" : ", ") + std::string(v.name);
    }
    throw std::invalid_argument("unknown " + kind_ + " convolution '" + name + "' (known: " + known + ")");
  }

 private:
  void fail(std::string e) { errors_.push_back(std::move(e)); }

  std::string kind_;
  std::vector<V> all_;
  std::vector<std::string> errors_;
};

// A role that is not chosen must say why.
inline std::string role_incomplete(const MilestoneRole& r, const char* milestone) {
  if ((r.role == Role::Never || r.role == Role::OnRequest) && (!r.reason || !*r.reason))
    return std::string("role '") + role_name(r.role) + "' in " + milestone + " needs a reason";
  return {};
}

}  // namespace pyconv

#define PYCONV_CONCAT_INNER(a, b) a##b
#define PYCONV_CONCAT(a, b) PYCONV_CONCAT_INNER(a, b)
