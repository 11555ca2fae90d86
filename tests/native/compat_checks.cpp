// Exercises the compatibility layer's CHECK / LOG family and tensor API outside any student file; prints one line
// per case for tests/test_student.py to compare. Each failing case must throw exactly one one-line dmlc::Error.
// Built with g++ and, as CUDA (nvcc -x cu), with the CUDA-only parts: MSHADOW_CUDA_CALL, half, Stream<gpu> (no
// GPU needed: the error is passed in, the conversions run on the host).
#include <mxnet/base.h>

#include <cstdio>
#include <string>

namespace {
int cases = 0;
template <typename F>
void expect_throw(const char* name, F f) {
  ++cases;
  try {
    f();
    std::printf("%s: no exception\n", name);
  } catch (const dmlc::Error& e) {
    std::printf("%s: %s\n", name, e.what());
  }
}
}  // namespace

int main() {
  expect_throw("eq", [] { CHECK_EQ(2, 3) << "two is not " << 3; });
  expect_throw("ne", [] { CHECK_NE(4, 4); });
  expect_throw("lt", [] { CHECK_LT(5u, 5u) << "strict"; });
  expect_throw("le", [] { CHECK_LE(7, 6); });
  expect_throw("gt", [] { CHECK_GT(-1, 0) << "negative"; });
  expect_throw("ge", [] { CHECK_GE(1.5, 2.5); });
  expect_throw("check", [] { CHECK(1 + 1 == 3) << "arithmetic" << std::endl << "second line"; });
  expect_throw("fatal", [] { LOG(FATAL) << "Not Implemented."; });
  expect_throw("notnull", [] {
    int* p = nullptr;
    CHECK_NOTNULL(p);
  });
  expect_throw("shape", [] { CHECK_EQ(mshadow::Shape2(2, 3), mshadow::Shape2(2, 4)) << "shapes"; });
  expect_throw("index", [] {
    float buf[6] = {};
    mshadow::Tensor<mshadow::cpu, 2, float> t(buf, mshadow::Shape2(2, 3));
    t[1][3] = 1.0f;
  });
#ifdef __CUDACC__
  expect_throw("cuda", [] { MSHADOW_CUDA_CALL(cudaErrorInvalidValue) });
  const half h = __float2half(0.25f);
  std::printf("cuda-info: half %g, default stream %s, %d threads\n", __half2float(h),
              mshadow::Stream<mshadow::gpu>::GetStream(nullptr) == nullptr ? "null" : "set",
              mshadow::cuda::kBaseThreadNum);
#endif
  // Passing checks: nothing thrown, the else of a dangling if still binds to the outer if.
  bool else_taken = false;
  if (false) CHECK_EQ(1, 1) << "never";
  else else_taken = true;
  CHECK(else_taken);
  CHECK_EQ(mshadow::Shape3(1, 2, 3), mshadow::Shape3(1, 2, 3));
  DCHECK_EQ(1, 2) << "compiled out, as in MXNet's release builds";
  // Tensor API: sub-tensor chains, size(), scalar fills, AllocSpace/FreeSpace, NewTensor.
  float data[2 * 3 * 4] = {};
  mshadow::Tensor<mshadow::cpu, 3, float> t(data, mshadow::Shape3(2, 3, 4));
  t[1][2][3] += 5.0f;
  t[0] = 2.0f;
  mshadow::Tensor<mshadow::cpu, 2, float> scratch(mshadow::Shape2(3, 4));
  mshadow::AllocSpace(&scratch);
  scratch = 1.5f;
  auto made = mshadow::NewTensor<mshadow::cpu>(mshadow::Shape1(5), 4.0f);
  std::printf("tensor: %g %g %g %g %u %u %g %g\n", data[23], data[0], data[11], data[12], t.size(2),
              t.shape_.Size(), scratch[2][3], made[4]);
  mshadow::FreeSpace(&scratch);
  mshadow::FreeSpace(&made);
  std::printf("cases: %d\n", cases);
  return 0;
}
