// The CUDA layers (layers/cuda) against their CPU twins (layers/cpu, float) on random data, for
// float, bf16 and f16 storage, at awkward shapes: forward and backward, += accumulation from
// non-zero starting values, in-place calls, writes outside the output (guard elements), and the
// bits of two identical calls of every reduction. Skips (GTEST_SKIP) on a machine with no device.
//
// Tolerances are relative to the largest |cpu| element of each tensor (an element that cancels to
// ~0 is judged against its tensor's scale): fp32 1e-5 for elementwise math (gelu), 1e-4 for
// reductions (layernorm, cross-entropy, their gradient sums), where the device adds in another
// order. For bf16/f16 the CPU runs in fp32 on exactly the device's inputs (rounded to T and
// widened), so a T output differs from it by its own rounding to nearest: at most the unit
// roundoff u of T times |value| <= u * max|cpu| (bf16: 8-bit significand, u = 2^-8; f16: 11-bit,
// u = 2^-11), plus the fp32 differences above; float outputs (mean, rstd, losses, lse,
// parameter gradients) keep the fp32 tolerance. Single IEEE operations per element (residual,
// embedding forward, dropout) and the embedding's sums (the CPU's order, see
// layers/cuda/embedding.cuh) must equal the CPU's fp32 result rounded to T bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/cuda_check.hpp"
#include "base/philox.hpp"
#include "layers/crossentropy.hpp"
#include "layers/cuda/crossentropy.cuh"
#include "layers/cuda/dropout.cuh"
#include "layers/cuda/embedding.cuh"
#include "layers/cuda/gelu.cuh"
#include "layers/cuda/layernorm.cuh"
#include "layers/cuda/relu.cuh"
#include "layers/cuda/residual.cuh"
#include "layers/cuda/rows.cuh"
#include "layers/cuda/tanh.cuh"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/relu.hpp"
#include "layers/residual.hpp"
#include "layers/tanh.hpp"
#include "tests/cuda_test_support.hpp"

using namespace mpitron;
using cuda_test::DeviceArray;
using cuda_test::Stream;

namespace {

float to_f(float x) {
  return x;
}
float to_f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
float to_f(__half x) {
  return __half2float(x);
}

template <class T>
T from_f(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);  // round to nearest even, as on the device
  else
    return __float2half(x);
}

// Unit roundoff of T's significand (0 for float: no rounding beyond the fp32 math).
template <class T>
constexpr double kRound = std::is_same_v<T, float>           ? 0.0
                          : std::is_same_v<T, __nv_bfloat16> ? 0x1p-8
                                                             : 0x1p-11;
template <class T>
constexpr double kElementwiseTol = kRound<T> + 1e-5;
template <class T>
constexpr double kReductionTol = kRound<T> + 1e-4;
constexpr double kFloatReductionTol = 1e-4;

template <class T>
std::vector<float> widen(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_f(x[i]);
  return y;
}

template <class T>
std::vector<T> narrow(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = from_f<T>(x[i]);
  return y;
}

// Random values as T (what the device gets) and the same values widened (what the CPU gets).
template <class T>
struct Data {
  std::vector<T> dev;
  std::vector<float> host;
};

template <class T>
Data<T> random_values(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  Data<T> d{std::vector<T>(n), {}};
  for (auto& e : d.dev) e = from_f<T>(shift + scale * dist(gen));
  d.host = widen(d.dev);
  return d;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  return random_values<float>(n, seed).host;
}

// Random values of magnitude >= 0.25, none 0 once rounded to T.
template <class T>
Data<T> nonzero_data(size_t n, uint32_t seed) {
  Data<T> d = random_values<T>(n, seed);
  for (size_t i = 0; i < n; ++i)
    d.dev[i] = from_f<T>(std::copysign(0.25f + std::abs(d.host[i]), d.host[i]));
  d.host = widen(d.dev);
  return d;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> t(n);
  for (auto& e : t) e = dist(gen);
  return t;
}

// Uploads are cudaMemcpy on the legacy stream, which the non-blocking test stream does not wait
// for: settle them before launching.
void settle() {
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Every |gpu - cpu| <= tol * max(max|cpu|, floor) (NaN fails).
void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol,
                  const std::string& what, double floor = 0) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double scale = floor;
  for (float c : cpu) scale = std::max(scale, double(std::abs(c)));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double err = std::abs(double(gpu[i]) - double(cpu[i]));
    if (!(err <= tol * scale) && bad++ == 0) first = i;
    if (!(err <= worst)) worst = err;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size() << " elements off by more than "
                     << tol << " x max(max|cpu|, floor) (" << scale << "); first at " << first
                     << ": gpu " << gpu[first] << " cpu " << cpu[first] << "; worst difference "
                     << worst;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
void expect_bitwise(const std::vector<T>& gpu, const std::vector<T>& expected,
                    const std::string& what) {
  ASSERT_EQ(gpu.size(), expected.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i)
    if (!same_bits(gpu[i], expected[i]) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size()
                     << " elements not bitwise equal; first at " << first << ": got "
                     << to_f(gpu[first]) << " expected " << to_f(expected[first]);
}

constexpr float kSentinel = -1536.0f;  // exact in every T

// n elements at offset `off` of a device buffer of off + n + 1 elements, the others a sentinel,
// so that writes outside [off, off + n) show. off = 1 misaligns the pointer (the kernels' element
// by element path); off = 0 leaves it aligned (their 16-byte path, then the tail).
template <class T>
class Guarded {
 public:
  Guarded(const std::vector<T>& x, size_t off) : off_(off), n_(x.size()), buf_(off + x.size() + 1) {
    std::vector<T> h(off_ + n_ + 1, from_f<T>(kSentinel));
    std::copy(x.begin(), x.end(), h.begin() + ptrdiff_t(off_));
    buf_.upload(h);
  }
  T* ptr() { return buf_.ptr + off_; }
  std::vector<T> download() const {
    const std::vector<T> h = buf_.download();
    return {h.begin() + ptrdiff_t(off_), h.begin() + ptrdiff_t(off_ + n_)};
  }
  bool guards_intact() const {
    const std::vector<T> h = buf_.download();
    const T s = from_f<T>(kSentinel);
    for (size_t i = 0; i < h.size(); ++i)
      if ((i < off_ || i >= off_ + n_) && !same_bits(h[i], s)) return false;
    return true;
  }

 private:
  size_t off_, n_;
  DeviceArray<T> buf_;
};

template <class T>
class CudaLayers : public ::testing::Test {};

using StorageTypes = ::testing::Types<float, __nv_bfloat16, __half>;
struct StorageNames {
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "f32";
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return "bf16";
    return "f16";
  }
};
TYPED_TEST_SUITE(CudaLayers, StorageTypes, StorageNames);

const size_t kElementwiseSizes[] = {1, 3, 37, 768, 1600, 130 * 37, 100003};

}  // namespace

TYPED_TEST(CudaLayers, GeluMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  struct Form {
    const char* name;
    void (*gpu_fwd)(T*, const T*, size_t, cudaStream_t);
    void (*gpu_bwd)(T*, const T*, const T*, size_t, cudaStream_t);
    void (*cpu_fwd)(float*, const float*, size_t);
    void (*cpu_bwd)(float*, const float*, const float*, size_t);
  };
  const Form forms[] = {{"tanh", cuda::gelu_forward<T>, cuda::gelu_backward<T>,
                         cpu::gelu_forward<float>, cpu::gelu_backward<float>},
                        {"erf", cuda::gelu_erf_forward<T>, cuda::gelu_erf_backward<T>,
                         cpu::gelu_erf_forward<float>, cpu::gelu_erf_backward<float>}};
  for (const Form& f : forms)
    for (size_t n : kElementwiseSizes)
      for (size_t off : {0, 1}) {
        const std::string where =
            std::string(f.name) + " n=" + std::to_string(n) + " off=" + std::to_string(off);
        const Data<T> x = random_values<T>(n, uint32_t(n + 1), 3.0f);
        const Data<T> dy = random_values<T>(n, uint32_t(n + 2));
        std::vector<float> ref(n), dref(n);
        f.cpu_fwd(ref.data(), x.host.data(), n);
        f.cpu_bwd(dref.data(), dy.host.data(), x.host.data(), n);

        Guarded<T> in(x.dev, off), out(std::vector<T>(n, from_f<T>(-7.0f)), off);
        Guarded<T> gdy(dy.dev, off), dx(std::vector<T>(n, from_f<T>(-7.0f)), off);
        settle();
        f.gpu_fwd(out.ptr(), in.ptr(), n, stream.s);
        f.gpu_bwd(dx.ptr(), gdy.ptr(), in.ptr(), n, stream.s);
        stream.sync();
        // Scale at least 1, the inputs' scale: for x << 0, 1 + tanh(u) and Phi(x) cancel and
        // both sides carry ~1e-7 absolute error, which a lone small max|cpu| (n = 1, 3) magnifies.
        expect_close(widen(out.download()), ref, kElementwiseTol<T>, where + " forward", 1.0);
        expect_close(widen(dx.download()), dref, kElementwiseTol<T>, where + " backward", 1.0);
        EXPECT_TRUE(out.guards_intact() && dx.guards_intact()) << where << ": wrote outside";

        // In place: out == inp.
        f.gpu_fwd(in.ptr(), in.ptr(), n, stream.s);
        stream.sync();
        expect_close(widen(in.download()), ref, kElementwiseTol<T>, where + " forward in place",
                     1.0);
      }
}

TYPED_TEST(CudaLayers, ResidualEqualsCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  for (size_t n : kElementwiseSizes)
    for (size_t off : {0, 1}) {
      const std::string where = "n=" + std::to_string(n) + " off=" + std::to_string(off);
      const Data<T> a = random_values<T>(n, uint32_t(n + 3)),
                    b = random_values<T>(n, uint32_t(n + 4));
      const Data<T> dout = random_values<T>(n, uint32_t(n + 5));
      const Data<T> da0 = random_values<T>(n, uint32_t(n + 6)),
                    db0 = random_values<T>(n, uint32_t(n + 7));
      std::vector<float> out(n), da = da0.host, db = db0.host;
      cpu::residual_forward(out.data(), a.host.data(), b.host.data(), n);
      cpu::residual_backward(da.data(), db.data(), dout.host.data(), n);

      Guarded<T> ga(a.dev, off), gb(b.dev, off), gout(std::vector<T>(n), off);
      // Mixed alignments too: da aligned, db as off says.
      Guarded<T> gdout(dout.dev, off), gda(da0.dev, 0), gdb(db0.dev, off);
      settle();
      cuda::residual_forward(gout.ptr(), ga.ptr(), gb.ptr(), n, stream.s);
      cuda::residual_backward(gda.ptr(), gdb.ptr(), gdout.ptr(), n, stream.s);
      stream.sync();
      // One fp32 add, rounded once to T: the CPU's fp32 sum rounded to T, bit for bit.
      expect_bitwise(gout.download(), narrow<T>(out), where + " forward");
      expect_bitwise(gda.download(), narrow<T>(da), where + " da +=");
      expect_bitwise(gdb.download(), narrow<T>(db), where + " db +=");
      EXPECT_TRUE(gout.guards_intact() && gda.guards_intact() && gdb.guards_intact())
          << where << ": wrote outside";

      cuda::residual_forward(ga.ptr(), ga.ptr(), gb.ptr(), n, stream.s);  // out == a
      stream.sync();
      expect_bitwise(ga.download(), narrow<T>(out), where + " forward in place");
    }
}

TYPED_TEST(CudaLayers, ReluEqualsCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  for (size_t n : kElementwiseSizes)
    for (size_t off : {0, 1}) {
      const std::string where = "n=" + std::to_string(n) + " off=" + std::to_string(off);
      Data<T> x = random_values<T>(n, uint32_t(n + 10));
      const Data<T> dy = random_values<T>(n, uint32_t(n + 11));
      // The kink and signed zeros: -0 stays -0 forward, and 0 passes no gradient.
      if (n > 2) {
        x.host[0] = 0.0f;
        x.host[1] = -0.0f;
        x.dev[0] = from_f<T>(0.0f);
        x.dev[1] = from_f<T>(-0.0f);
      }
      std::vector<float> y(n), dx(n);
      cpu::relu_forward(y.data(), x.host.data(), n);
      cpu::relu_backward(dx.data(), dy.host.data(), x.host.data(), n);

      Guarded<T> gx(x.dev, off), gy(std::vector<T>(n, from_f<T>(-7.0f)), off);
      Guarded<T> gdy(dy.dev, off);
      settle();
      cuda::relu_forward(gy.ptr(), gx.ptr(), n, stream.s);
      cuda::relu_backward(gdy.ptr(), gdy.ptr(), gx.ptr(), n, stream.s);  // dinp == dout
      stream.sync();
      expect_bitwise(gy.download(), narrow<T>(y), where + " forward");
      expect_bitwise(gdy.download(), narrow<T>(dx), where + " backward");
      EXPECT_TRUE(gy.guards_intact() && gdy.guards_intact()) << where << ": wrote outside";
    }
}

TYPED_TEST(CudaLayers, TanhMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  for (size_t n : kElementwiseSizes)
    for (size_t off : {0, 1}) {
      const std::string where = "n=" + std::to_string(n) + " off=" + std::to_string(off);
      const Data<T> x = random_values<T>(n, uint32_t(n + 12), 2.0f);
      const Data<T> dy = random_values<T>(n, uint32_t(n + 13));
      std::vector<float> y(n), dx(n);
      cpu::tanh_forward(y.data(), x.host.data(), n);
      // Backward from the GPU's own output rounded to T (what the model keeps), as the CPU would.
      Guarded<T> gx(x.dev, off), gy(std::vector<T>(n, from_f<T>(-7.0f)), off), gdy(dy.dev, off);
      settle();
      cuda::tanh_forward(gy.ptr(), gx.ptr(), n, stream.s);
      stream.sync();
      const std::vector<float> y_gpu = widen(gy.download());
      cpu::tanh_backward(dx.data(), dy.host.data(), y_gpu.data(), n);
      cuda::tanh_backward(gdy.ptr(), gdy.ptr(), gy.ptr(), n, stream.s);
      stream.sync();
      expect_close(y_gpu, y, kElementwiseTol<T>, where + " forward", 1.0);
      expect_close(widen(gdy.download()), dx, kElementwiseTol<T>, where + " backward", 1.0);
      EXPECT_TRUE(gy.guards_intact() && gdy.guards_intact()) << where << ": wrote outside";
    }
}

// The encoder's rows by index, against loops written here: gathers and strided copies move bits;
// the additions are one fp32 add per element rounded once (float: the CPU's bits exactly), and the
// table's backward sums each column's rows in ascending order.
TYPED_TEST(CudaLayers, RowsByIndexEqualTheirDefinitions) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  const int N = 37, C = 70, M = 11, types = 3;
  const Data<T> x = random_values<T>(size_t(N) * C, 21),
                table = random_values<T>(size_t(types) * C, 22);
  const Data<T> src = random_values<T>(size_t(M) * C, 23);
  std::vector<int32_t> rows(M), type_of(N);
  for (int k = 0; k < M; ++k) rows[k] = (k * 7 + 3) % N;  // distinct: 7 and 37 are coprime
  for (int n = 0; n < N; ++n) type_of[n] = (n * n) % types;
  DeviceArray<int32_t> g_rows(rows), g_types(type_of);
  auto round_host = [](std::vector<float> v) { return narrow<T>(v); };

  std::vector<float> gathered(size_t(M) * C), scattered = x.host, added = x.host;
  std::vector<float> dtable(size_t(types) * C, 0.5f), strided(size_t(N) * C, 0.0f);
  for (int k = 0; k < M; ++k)
    for (int c = 0; c < C; ++c) {
      gathered[size_t(k) * C + c] = x.host[size_t(rows[k]) * C + c];
      scattered[size_t(rows[k]) * C + c] += src.host[size_t(k) * C + c];
    }
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      added[size_t(n) * C + c] += table.host[size_t(type_of[n]) * C + c];
      dtable[size_t(type_of[n]) * C + c] += x.host[size_t(n) * C + c];
    }
  // Columns 5..5+20 of every third row of x into the first 20 columns of consecutive rows of 30.
  const int rows_s = N / 3, cols_s = 20;
  for (int r = 0; r < rows_s; ++r)
    for (int c = 0; c < cols_s; ++c)
      strided[size_t(r) * 30 + c] = x.host[size_t(r) * 3 * C + 5 + c];

  DeviceArray<T> g_x(x.dev), g_table(table.dev), g_src(src.dev), g_out(size_t(M) * C);
  DeviceArray<T> g_scatter(x.dev), g_added(x.dev), g_strided(std::vector<T>(size_t(N) * C));
  DeviceArray<float> g_dtable(std::vector<float>(size_t(types) * C, 0.5f));
  cuda::gather_rows(g_out.ptr, g_x.ptr, g_rows.ptr, M, C, stream.s);
  cuda::scatter_add_rows(g_scatter.ptr, g_src.ptr, g_rows.ptr, M, C, stream.s);
  cuda::add_table_rows(g_added.ptr, g_table.ptr, g_types.ptr, N, C, stream.s);
  cuda::table_rows_backward(g_dtable.ptr, g_x.ptr, g_types.ptr, N, C, stream.s);
  cuda::copy_strided(g_strided.ptr, 30, g_x.ptr + 5, 3 * C, rows_s, cols_s, stream.s);
  stream.sync();
  expect_bitwise(g_out.download(), round_host(gathered), "gather_rows");
  expect_bitwise(g_scatter.download(), round_host(scattered), "scatter_add_rows");
  expect_bitwise(g_added.download(), round_host(added), "add_table_rows");
  expect_bitwise(g_dtable.download(), dtable, "table_rows_backward");
  expect_bitwise(g_strided.download(), round_host(strided), "copy_strided");
}

TYPED_TEST(CudaLayers, DropoutMaskIsTheCpuMask) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  const PhiloxStream rng{1234, mix64(7, 3)};
  const int shapes[][2] = {{1, 1}, {5, 3}, {130, 37}, {5, 768}, {130, 1600}};
  for (const auto& shape : shapes)
    for (float p : {0.0f, 0.1f, 0.5f, 1.0f})
      for (uint64_t row0 : {uint64_t(0), uint64_t(12345), (uint64_t(1) << 40) + 7}) {
        const int N = shape[0], C = shape[1];
        const size_t n = size_t(N) * size_t(C);
        const std::string where = "N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                  " p=" + std::to_string(p) + " row0=" + std::to_string(row0);
        // No input is 0, so a zero output is exactly a dropped element.
        const Data<T> x = nonzero_data<T>(n, uint32_t(n + 8)),
                      g = nonzero_data<T>(n, uint32_t(n + 9));
        std::vector<float> y(n), dx(n);
        cpu::dropout_forward(y.data(), x.host.data(), p, rng, row0, N, C);
        cpu::dropout_backward(dx.data(), g.host.data(), p, rng, row0, N, C);

        Guarded<T> gx(x.dev, 0), gy(std::vector<T>(n, from_f<T>(-7.0f)), 0);
        Guarded<T> gg(g.dev, 1);  // backward in place (dinp == dout), misaligned
        settle();
        cuda::dropout_forward(gy.ptr(), gx.ptr(), p, rng, row0, N, C, stream.s);
        cuda::dropout_backward(gg.ptr(), gg.ptr(), p, rng, row0, N, C, stream.s);
        stream.sync();
        const std::vector<T> out = gy.download(), din = gg.download();
        size_t zero_mismatch = 0, dropped = 0;
        for (size_t i = 0; i < n; ++i) {
          zero_mismatch += (to_f(out[i]) == 0.0f) != (y[i] == 0.0f);
          dropped += y[i] == 0.0f;
        }
        EXPECT_EQ(zero_mismatch, 0u) << where << ": dropped elements differ from the CPU's mask";
        if (p == 0.0f) {
          EXPECT_EQ(dropped, 0u) << where;
        }
        if (p == 1.0f) {
          EXPECT_EQ(dropped, n) << where;
        }
        if (p == 0.5f && n >= 1000) {  // the mask itself is not degenerate
          EXPECT_GT(dropped, n * 2 / 5) << where;
          EXPECT_LT(dropped, n * 3 / 5) << where;
        }
        // Kept values are one fp32 multiply by the CPU's scale, rounded once: bitwise.
        expect_bitwise(out, narrow<T>(y), where + " forward");
        expect_bitwise(din, narrow<T>(dx), where + " backward in place");
        EXPECT_TRUE(gy.guards_intact() && gg.guards_intact()) << where << ": wrote outside";

        cuda::dropout_forward(gx.ptr(), gx.ptr(), p, rng, row0, N, C, stream.s);  // out == inp
        stream.sync();
        expect_bitwise(gx.download(), narrow<T>(y), where + " forward in place");
      }
}

TYPED_TEST(CudaLayers, EncoderEqualsCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  using S = TypeParam;
  Stream stream;
  struct Shape {
    int B, T, C, V, maxT;
    bool one_token;  // every position the same token: one run of B*T
  };
  const Shape shapes[] = {{1, 1, 1, 1, 1, false},       {2, 3, 37, 5, 4, false},
                          {4, 33, 768, 50, 40, false},  {3, 64, 1600, 7, 64, false},
                          {5, 26, 3, 50257, 30, false}, {2, 65, 37, 9, 65, true}};
  for (const Shape& sh : shapes) {
    const int B = sh.B, T = sh.T, C = sh.C, V = sh.V, N = B * T;
    const std::string where = "B=" + std::to_string(B) + " T=" + std::to_string(T) +
                              " C=" + std::to_string(C) + " V=" + std::to_string(V);
    std::vector<int32_t> tokens = random_tokens(size_t(N), V, uint32_t(N + C));
    if (sh.one_token) std::fill(tokens.begin(), tokens.end(), 4);
    tokens.back() = V - 1;  // the last row of wte too
    const Data<S> wte = random_values<S>(size_t(V) * C, 11),
                  wpe = random_values<S>(size_t(sh.maxT) * C, 12);
    const Data<S> dout = random_values<S>(size_t(N) * C, 13);
    const std::vector<float> dwte0 = random_floats(size_t(V) * C, 14);
    const std::vector<float> dwpe0 = random_floats(size_t(sh.maxT) * C, 15);

    std::vector<float> out(size_t(N) * C), dwte = dwte0, dwpe = dwpe0;
    cpu::embedding_forward(out.data(), tokens.data(), wte.host.data(), wpe.host.data(), B, T, C);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.host.data(), tokens.data(), B, T, C);

    DeviceArray<int32_t> gtok(tokens);
    DeviceArray<S> gwte(wte.dev), gwpe(wpe.dev), gdout(dout.dev);
    Guarded<S> gout(std::vector<S>(size_t(N) * C), 0);
    DeviceArray<float> gdwte(dwte0), gdwpe(dwpe0);
    DeviceArray<unsigned char> scratch(cuda::embedding_backward_scratch_bytes(B, T));
    settle();
    cuda::embedding_forward(gout.ptr(), gtok.ptr, gwte.ptr, gwpe.ptr, B, T, C, stream.s);
    cuda::embedding_backward(gdwte.ptr, gdwpe.ptr, gdout.ptr, gtok.ptr, B, T, C, scratch.ptr,
                             stream.s);
    stream.sync();
    // Forward: one add rounded once. Backward: the CPU's sequence of fp32 additions.
    expect_bitwise(gout.download(), narrow<S>(out), where + " forward");
    EXPECT_TRUE(gout.guards_intact()) << where << ": wrote outside";
    const std::vector<float> first_dwte = gdwte.download(), first_dwpe = gdwpe.download();
    expect_bitwise(first_dwte, dwte, where + " dwte +=");
    expect_bitwise(first_dwpe, dwpe, where + " dwpe +=");

    // Two identical calls, the same bits (whatever the CPU comparison says).
    gdwte.upload(dwte0);
    gdwpe.upload(dwpe0);
    settle();
    cuda::embedding_backward(gdwte.ptr, gdwpe.ptr, gdout.ptr, gtok.ptr, B, T, C, scratch.ptr,
                             stream.s);
    stream.sync();
    expect_bitwise(gdwte.download(), first_dwte, where + " dwte, second call");
    expect_bitwise(gdwpe.download(), first_dwpe, where + " dwpe, second call");
  }
}

// Tensor parallelism's pieces (the layer table's shard entries) against the CPU's on the same
// widened inputs: a row-parallel bias added after the sum and the embedding's shard, its positions
// and backward bit for bit (one add rounded once; the CPU's sequence of fp32 additions); the
// cross-entropy's shard statistics (the row max and the target's logit exactly, the sum of
// exponentials and the loss within a float reduction's error) and backward within the storage
// type's, padding columns 0 and a masked row 0.
TYPED_TEST(CudaLayers, TensorParallelShardsMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  struct Shard {
    int V, Vl, v0;  // vocabulary, the shard's columns, its first
  };
  // A shard with padding, one without, one of padding only (tp 4, V 5: rank 3), GPT-2's at tp 2.
  const Shard shards[] = {{11, 6, 6}, {11, 6, 0}, {5, 2, 6}, {50257, 25216, 25216}};
  const int B = 3, T_ = 5, C = 37, N = B * T_, maxT = 8;
  const float dloss = 0.37f;
  for (const Shard& sh : shards) {
    const int V = sh.V, Vl = sh.Vl, v0 = sh.v0;
    const std::string where =
        "V=" + std::to_string(V) + " Vl=" + std::to_string(Vl) + " v0=" + std::to_string(v0);
    std::vector<int32_t> targets = random_tokens(size_t(N), V, uint32_t(V + 3));
    targets[1] = -1;                   // a masked row
    targets[2] = std::min(v0, V - 1);  // a target on this shard where it has real columns
    const size_t NV = size_t(N) * Vl;
    const Data<T> logits = random_values<T>(NV, uint32_t(V + 4), 3.0f);
    const int real = std::clamp(V - v0, 0, Vl);

    std::vector<float> mx(N), tl(N), sum(N), losses(N), lse(N), d(NV);
    cpu::crossentropy_shard_stats(mx.data(), tl.data(), logits.host.data(), targets.data(), N, Vl,
                                  v0, V);
    // The sum and loss as after the all-reduces at a rank holding all of V: this shard's max.
    for (float& m : mx) m = std::isfinite(m) ? m : 0.0f;
    cpu::crossentropy_shard_sumexp(sum.data(), logits.host.data(), mx.data(), N, Vl, v0, V);
    for (float& x : sum) x = x > 0 ? x : 1.0f;
    cpu::crossentropy_shard_loss(losses.data(), lse.data(), mx.data(), sum.data(), tl.data(),
                                 targets.data(), N);
    cpu::crossentropy_shard_backward(d.data(), logits.host.data(), lse.data(), targets.data(),
                                     dloss, N, Vl, v0, V);

    DeviceArray<T> glogits(logits.dev), gd(NV);
    DeviceArray<int32_t> gtargets(targets);
    DeviceArray<float> gmx(static_cast<size_t>(N)), gtl(static_cast<size_t>(N)),
        gsum(static_cast<size_t>(N)), glosses(static_cast<size_t>(N)), glse(static_cast<size_t>(N)),
        cpu_mx(mx), cpu_sum(sum), cpu_tl(tl), cpu_lse(lse);
    settle();
    cuda::crossentropy_shard_stats(gmx.ptr, gtl.ptr, glogits.ptr, gtargets.ptr, N, Vl, v0, V,
                                   stream.s);
    cuda::crossentropy_shard_sumexp(gsum.ptr, glogits.ptr, cpu_mx.ptr, N, Vl, v0, V, stream.s);
    cuda::crossentropy_shard_loss(glosses.ptr, glse.ptr, cpu_mx.ptr, cpu_sum.ptr, cpu_tl.ptr,
                                  gtargets.ptr, N, stream.s);
    cuda::crossentropy_shard_backward(gd.ptr, glogits.ptr, cpu_lse.ptr, gtargets.ptr, dloss, N, Vl,
                                      v0, V, stream.s);
    stream.sync();
    std::vector<float> gpu_mx = gmx.download();
    for (float& m : gpu_mx) m = std::isfinite(m) ? m : 0.0f;
    expect_bitwise(gpu_mx, mx, where + " row max");
    expect_bitwise(gtl.download(), tl, where + " target logit");
    if (real > 0) expect_close(gsum.download(), sum, kFloatReductionTol, where + " sum of exp");
    expect_close(glosses.download(), losses, kFloatReductionTol, where + " losses", 1.0);
    expect_close(glse.download(), lse, kFloatReductionTol, where + " lse", 1.0);
    const std::vector<float> gpu_d = widen(gd.download());
    expect_close(gpu_d, d, kReductionTol<T>, where + " dlogits", 1e-3);
    bool padding_and_masked_zero = true;
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < Vl; ++j)
        if ((j >= real || targets[size_t(n)] < 0) && gpu_d[size_t(n) * Vl + j] != 0.0f)
          padding_and_masked_zero = false;
    EXPECT_TRUE(padding_and_masked_zero) << where << ": padding or a masked row not 0";

    // The embedding's shard over tokens of the whole vocabulary, and its positions.
    if (V > 1000) continue;
    const std::vector<int32_t> tokens = random_tokens(size_t(N), V, uint32_t(V + 5));
    const Data<T> wte = random_values<T>(size_t(Vl) * C, 21),
                  wpe = random_values<T>(size_t(maxT) * C, 22);
    const Data<T> dout = random_values<T>(size_t(N) * C, 23),
                  bias = random_values<T>(size_t(C), 24);
    const std::vector<float> dwte0 = random_floats(size_t(Vl) * C, 25),
                             dwpe0 = random_floats(size_t(maxT) * C, 26);
    std::vector<float> out(size_t(N) * C), biased(size_t(N) * C), dwte = dwte0, dwpe = dwpe0;
    cpu::embedding_shard_forward(out.data(), tokens.data(), wte.host.data(), N, C, v0, Vl);
    cpu::embedding_add_positions(out.data(), wpe.host.data(), B, T_, C);
    cpu::embedding_shard_backward(dwte.data(), dwpe.data(), dout.host.data(), tokens.data(), B, T_,
                                  C, v0, Vl);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        biased[size_t(n) * C + c] = dout.host[size_t(n) * C + c] + bias.host[size_t(c)];

    DeviceArray<int32_t> gtok(tokens);
    DeviceArray<T> gwte(wte.dev), gwpe(wpe.dev), gdout(dout.dev), gbias(bias.dev),
        gbiased(dout.dev);
    Guarded<T> gout(std::vector<T>(size_t(N) * C), 0);
    DeviceArray<float> gdwte(dwte0), gdwpe(dwpe0);
    DeviceArray<unsigned char> scratch(cuda::embedding_backward_scratch_bytes(B, T_));
    settle();
    cuda::embedding_shard_forward(gout.ptr(), gtok.ptr, gwte.ptr, N, C, v0, Vl, stream.s);
    cuda::embedding_add_positions(gout.ptr(), gwpe.ptr, B, T_, C, stream.s);
    cuda::embedding_shard_backward(gdwte.ptr, gdwpe.ptr, gdout.ptr, gtok.ptr, B, T_, C, v0, Vl,
                                   scratch.ptr, stream.s);
    cuda::add_bias_rows(gbiased.ptr, gbias.ptr, N, C, stream.s);
    stream.sync();
    // The shard's rows are copied (or zeroed) and the positions added once: the CPU's bits
    // rounded to T, as the whole-vocabulary embedding.
    expect_bitwise(gout.download(), narrow<T>(out), where + " embedding shard");
    EXPECT_TRUE(gout.guards_intact()) << where << ": wrote outside";
    expect_bitwise(gdwte.download(), dwte, where + " dwte +=");
    expect_bitwise(gdwpe.download(), dwpe, where + " dwpe +=");
    expect_bitwise(gbiased.download(), narrow<T>(biased), where + " bias rows");
  }
}

TYPED_TEST(CudaLayers, LayerNormMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  std::vector<std::pair<int, int>> shapes;
  for (int N : {1, 5, 130})
    for (int C : {1, 3, 37, 768, 1600}) shapes.emplace_back(N, C);
  shapes.emplace_back(4099, 37);  // 128 row chunks of 33, the last three empty
  for (const auto& [N, C] : shapes) {
    const size_t n = size_t(N) * size_t(C);
    const std::string where = "N=" + std::to_string(N) + " C=" + std::to_string(C);
    const Data<T> x = random_values<T>(n, uint32_t(n + 16), 2.0f, 1.5f);  // a mean to remove
    const Data<T> w = random_values<T>(size_t(C), 17, 0.5f, 1.0f),
                  b = random_values<T>(size_t(C), 18);
    const Data<T> dy = random_values<T>(n, uint32_t(n + 19)),
                  dx0 = random_values<T>(n, uint32_t(n + 20));
    const std::vector<float> dw0 = random_floats(size_t(C), 21), db0 = random_floats(size_t(C), 22);

    std::vector<float> y(n), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.host.data(), w.host.data(),
                           b.host.data(), N, C, 1e-5);
    std::vector<float> dx = dx0.host, dw = dw0, db = db0;
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.host.data(), x.host.data(),
                            w.host.data(), mean.data(), rstd.data(), N, C);

    DeviceArray<T> gx(x.dev), gw(w.dev), gb(b.dev), gy(n), gdy(dy.dev), gdx(dx0.dev);
    DeviceArray<float> gmean(static_cast<size_t>(N)), grstd(static_cast<size_t>(N)), gdw(dw0),
        gdb(db0);
    DeviceArray<float> cpu_mean(mean), cpu_rstd(rstd);  // backward's inputs, as the CPU's
    DeviceArray<float> scratch(cuda::layernorm_backward_scratch(N, C));
    settle();
    cuda::layernorm_forward(gy.ptr, gmean.ptr, grstd.ptr, gx.ptr, gw.ptr, gb.ptr, N, C, 1e-5,
                            stream.s);
    cuda::layernorm_backward(gdx.ptr, gdw.ptr, gdb.ptr, gdy.ptr, gx.ptr, gw.ptr, cpu_mean.ptr,
                             cpu_rstd.ptr, N, C, scratch.ptr, stream.s);
    stream.sync();
    const std::vector<T> y1 = gy.download(), dx1 = gdx.download();
    const std::vector<float> mean1 = gmean.download(), rstd1 = grstd.download();
    const std::vector<float> dw1 = gdw.download(), db1 = gdb.download();
    expect_close(widen(y1), y, kReductionTol<T>, where + " out");
    expect_close(mean1, mean, kFloatReductionTol, where + " mean");
    expect_close(rstd1, rstd, kFloatReductionTol, where + " rstd");
    expect_close(widen(dx1), dx, kReductionTol<T>, where + " dinp +=");
    expect_close(dw1, dw, kFloatReductionTol, where + " dweight +=");
    expect_close(db1, db, kFloatReductionTol, where + " dbias +=");

    // Two identical calls, the same bits.
    gdx.upload(dx0.dev);
    gdw.upload(dw0);
    gdb.upload(db0);
    settle();
    cuda::layernorm_forward(gy.ptr, gmean.ptr, grstd.ptr, gx.ptr, gw.ptr, gb.ptr, N, C, 1e-5,
                            stream.s);
    cuda::layernorm_backward(gdx.ptr, gdw.ptr, gdb.ptr, gdy.ptr, gx.ptr, gw.ptr, cpu_mean.ptr,
                             cpu_rstd.ptr, N, C, scratch.ptr, stream.s);
    stream.sync();
    expect_bitwise(gy.download(), y1, where + " out, second call");
    expect_bitwise(gmean.download(), mean1, where + " mean, second call");
    expect_bitwise(grstd.download(), rstd1, where + " rstd, second call");
    expect_bitwise(gdx.download(), dx1, where + " dinp, second call");
    expect_bitwise(gdw.download(), dw1, where + " dweight, second call");
    expect_bitwise(gdb.download(), db1, where + " dbias, second call");
  }
}

TYPED_TEST(CudaLayers, CrossEntropyMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  using T = TypeParam;
  Stream stream;
  const int shapes[][2] = {{1, 1},  {5, 3},     {1, 257},     {130, 257},
                           {5, 65}, {5, 50257}, {130, 50257}, {3, 50304}};
  const float dloss = 0.37f;
  for (const auto& shape : shapes) {
    const int N = shape[0], V = shape[1];
    const size_t n = size_t(N) * size_t(V);
    const std::string where = "N=" + std::to_string(N) + " V=" + std::to_string(V);
    const Data<T> logits = random_values<T>(n, uint32_t(n + 23), 3.0f);
    std::vector<int32_t> targets = random_tokens(size_t(N), V, uint32_t(N + 24));
    targets.front() = 0;  // both ends of a row
    targets.back() = V - 1;

    std::vector<float> losses(static_cast<size_t>(N)), lse(static_cast<size_t>(N)), dlogits(n);
    cpu::crossentropy_forward(losses.data(), lse.data(), logits.host.data(), targets.data(), N, V);
    cpu::crossentropy_backward(dlogits.data(), logits.host.data(), lse.data(), targets.data(),
                               dloss, N, V);

    DeviceArray<T> glogits(logits.dev), gd(n), ginplace(logits.dev);
    DeviceArray<int32_t> gtargets(targets);
    DeviceArray<float> glosses(static_cast<size_t>(N)), glse(static_cast<size_t>(N)), cpu_lse(lse);
    settle();
    cuda::crossentropy_forward(glosses.ptr, glse.ptr, glogits.ptr, gtargets.ptr, N, V, stream.s);
    cuda::crossentropy_backward(gd.ptr, glogits.ptr, cpu_lse.ptr, gtargets.ptr, dloss, N, V,
                                stream.s);
    cuda::crossentropy_backward(ginplace.ptr, ginplace.ptr, cpu_lse.ptr, gtargets.ptr, dloss, N, V,
                                stream.s);  // dlogits == logits
    stream.sync();
    const std::vector<float> losses1 = glosses.download(), lse1 = glse.download();
    const std::vector<T> d1 = gd.download();
    expect_close(losses1, losses, kFloatReductionTol, where + " losses");
    expect_close(lse1, lse, kFloatReductionTol, where + " lse");
    expect_close(widen(d1), dlogits, kReductionTol<T>, where + " dlogits");
    expect_bitwise(ginplace.download(), d1, where + " dlogits in place");

    // Two identical calls, the same bits.
    cuda::crossentropy_forward(glosses.ptr, glse.ptr, glogits.ptr, gtargets.ptr, N, V, stream.s);
    stream.sync();
    expect_bitwise(glosses.download(), losses1, where + " losses, second call");
    expect_bitwise(glse.download(), lse1, where + " lse, second call");
  }
}
