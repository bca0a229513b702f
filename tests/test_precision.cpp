// --precision bf16|fp16: the 16-bit formats' rounding, the CPU's 16-bit layer tables (every output
// is the float layer's output rounded once, on inputs the format holds), and the GPT in 16-bit
// storage against the same GPT in fp32 (tolerances from the formats' precision, stated at each).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "base/check.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/precision.hpp"
#include "src/train/grad_sync.hpp"
#include "tests/gpt_precision_run.hpp"

using namespace mpitron;

namespace {

template <class A>
uint16_t bits_of(float x) {
  A h;
  round_to(&h, &x, 1);
  return h.bits;
}
template <class A>
float value_of(uint16_t bits) {
  A h{bits};
  float x = 0;
  widen(&x, &h, 1);
  return x;
}

}  // namespace

TEST(Precision, NamesRoundTripAndUnknownNamesAreRefused) {
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    EXPECT_EQ(parse_precision(precision_name(t)), t);
  EXPECT_THROW(parse_precision("fp8"), UsageError);
  EXPECT_THROW(parse_precision("float16"), UsageError);
}

TEST(Precision, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bits_of<bf16_t>(1.0f), 0x3F80);
  EXPECT_EQ(bits_of<bf16_t>(-2.0f), 0xC000);
  EXPECT_EQ(bits_of<bf16_t>(1.0f + 0x1p-8f), 0x3F80);             // tie: to the even 1.0
  EXPECT_EQ(bits_of<bf16_t>(1.0f + 3 * 0x1p-8f), 0x3F82);         // tie: to the even 1 + 2^-6
  EXPECT_EQ(bits_of<bf16_t>(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // above the tie: up
  EXPECT_TRUE(std::isfinite(value_of<bf16_t>(bits_of<bf16_t>(1e30f))));  // fp32's range
  EXPECT_TRUE(std::isnan(value_of<bf16_t>(bits_of<bf16_t>(std::nanf("")))));
  EXPECT_EQ(value_of<bf16_t>(0x3F81), 1.0f + 0x1p-7f);
}

TEST(Precision, Fp16RoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(bits_of<fp16_t>(1.0f), 0x3C00);
  EXPECT_EQ(bits_of<fp16_t>(65504.0f), 0x7BFF);  // the largest finite fp16
  EXPECT_EQ(bits_of<fp16_t>(65519.0f), 0x7BFF);  // below the tie with 65536: stays finite
  EXPECT_EQ(bits_of<fp16_t>(65520.0f), 0x7C00);  // the tie: to the even, infinity
  EXPECT_EQ(bits_of<fp16_t>(-1e6f), 0xFC00);
  EXPECT_EQ(bits_of<fp16_t>(1.0f + 0x1p-11f), 0x3C00);  // tie: to the even 1.0
  EXPECT_EQ(bits_of<fp16_t>(0x1p-24f), 0x0001);         // the smallest subnormal
  EXPECT_EQ(bits_of<fp16_t>(0x1p-26f), 0x0000);         // below half of it: zero
  EXPECT_TRUE(std::isinf(value_of<fp16_t>(0x7C00)));
  EXPECT_EQ(value_of<fp16_t>(0x3555), 0.333251953125f);
}

// round_to(fp16_t*) converts eight floats at a time where the CPU can: the same bits as the
// element-at-a-time reference at every fp16 value, the floats next to it and the ties between
// neighbours, subnormals, zeros, infinities, NaNs of both signs in any lane, random bit patterns,
// and every length's remainder.
TEST(Precision, Fp16VectorRoundingEqualsTheReference) {
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = value_of<fp16_t>(uint16_t(h));
    x.push_back(v);
    if (std::isnan(v)) continue;
    x.push_back(std::nextafter(v, INFINITY));
    x.push_back(std::nextafter(v, -INFINITY));
    if (h & 0x7fff) x.push_back(std::ldexp(v, 1) - v / 2);  // between the binades' steps
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // ties and their neighbours, both signs
    const float lo = value_of<fp16_t>(uint16_t(h)), hi = value_of<fp16_t>(uint16_t(h + 1));
    const float mid = lo + (hi - lo) / 2;
    for (float t : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      x.push_back(t);
      x.push_back(-t);
    }
  }
  uint32_t seed = 12345;
  for (int i = 0; i < (1 << 20); ++i) {
    seed = seed * 1664525u + 1013904223u;
    x.push_back(std::bit_cast<float>(seed));
  }
  for (float s : {0x1p-149f, -0x1p-149f, 0x1p-126f, 0.0f, -0.0f, INFINITY, -INFINITY,
                  std::bit_cast<float>(0x7fc00001u), std::bit_cast<float>(0xffbfffffu),
                  std::bit_cast<float>(0x7f800001u), 65520.0f, -65520.0f, 1e30f})
    x.push_back(s);
  std::vector<fp16_t> got(x.size()), want(x.size());
  round_to_reference(want.data(), x.data(), x.size());
  for (size_t n : {x.size(), size_t(0), size_t(1), size_t(7), size_t(9), size_t(23)}) {
    const size_t at = x.size() - n;  // the tail: its specials land in the scalar remainder too
    round_to(got.data(), x.data() + at, n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i].bits, want[at + i].bits)
          << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(x[at + i]) << " (length "
          << std::dec << n << ", element " << i << ")";
  }
}

namespace {

// Data the 16-bit format A holds exactly: the same values for the float and the 16-bit layer.
template <class A>
struct Exact {
  std::vector<float> f;
  std::vector<A> h;
  Exact(size_t n, uint32_t seed, float scale) : f(n), h(n) {
    uint32_t x = seed;
    for (float& v : f) {
      x = x * 1664525u + 1013904223u;
      v = scale * (float(x >> 8) / float(1u << 24) * 2.0f - 1.0f);
    }
    round_to(h.data(), f.data(), n);
    widen(f.data(), h.data(), n);
  }
};

// The 16-bit layer's outputs are the float layer's, rounded: bit for bit.
template <class A>
void expect_rounded(const std::vector<A>& got, const std::vector<float>& want, const char* what) {
  std::vector<A> r(want.size());
  round_to(r.data(), want.data(), want.size());
  ASSERT_EQ(got.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i)
    ASSERT_EQ(got[i].bits, r[i].bits) << what << " element " << i;
}

template <class A>
void check_layers_round_the_float_layers() {
  const LayerOps& F = cpu_layer_ops();
  const LayerOpsT<A>& H = layer_ops<A>(Device::cpu);
  const int B = 2, T = 8, C = 32, NH = 2, N = B * T, V = 40;
  const size_t NC = size_t(N) * C;
  Exact<A> x(NC, 1, 1.5f), y(NC, 2, 1.0f), w(size_t(3 * C) * C, 3, 0.2f), b(3 * C, 4, 0.1f),
      lnw(C, 5, 1.0f), dout(NC, 6, 0.5f), qkv(NC * 3, 7, 1.0f), logits(size_t(N) * V, 8, 3.0f);
  std::vector<float> of(NC * 3), mean(N), rstd(N), mean16(N), rstd16(N);
  std::vector<A> oh(NC * 3);

  F.linear_forward(of.data(), x.f.data(), w.f.data(), b.f.data(), N, C, 3 * C);
  H.linear_forward(oh.data(), x.h.data(), w.h.data(), b.h.data(), N, C, 3 * C);
  expect_rounded(oh, of, "linear_forward");

  std::vector<float> dwf(size_t(3 * C) * C), dbf(3 * C), dwh(dwf.size()), dbh(dbf.size());
  std::vector<float> dinf(NC);
  std::vector<A> dinh(NC);
  F.linear_backward(dinf.data(), dwf.data(), dbf.data(), qkv.f.data(), x.f.data(), w.f.data(), N, C,
                    3 * C);
  H.linear_backward(dinh.data(), dwh.data(), dbh.data(), qkv.h.data(), x.h.data(), w.h.data(), N, C,
                    3 * C);
  expect_rounded(dinh, dinf, "linear_backward dinp");
  EXPECT_EQ(dwf, dwh) << "linear_backward: parameter gradients stay fp32";
  EXPECT_EQ(dbf, dbh);

  of.assign(NC, 0);
  oh.assign(NC, A{});
  F.layernorm_forward(of.data(), mean.data(), rstd.data(), x.f.data(), lnw.f.data(), b.f.data(), N,
                      C, 1e-5);
  H.layernorm_forward(oh.data(), mean16.data(), rstd16.data(), x.h.data(), lnw.h.data(), b.h.data(),
                      N, C, 1e-5);
  expect_rounded(oh, of, "layernorm_forward");
  EXPECT_EQ(mean, mean16);
  EXPECT_EQ(rstd, rstd16);

  // dinp += : both start from y.
  std::vector<float> gf = y.f, lwf(C), lbf(C), lwh(C), lbh(C);
  std::vector<A> gh = y.h;
  F.layernorm_backward(gf.data(), lwf.data(), lbf.data(), dout.f.data(), x.f.data(), lnw.f.data(),
                       mean.data(), rstd.data(), N, C);
  H.layernorm_backward(gh.data(), lwh.data(), lbh.data(), dout.h.data(), x.h.data(), lnw.h.data(),
                       mean.data(), rstd.data(), N, C);
  expect_rounded(gh, gf, "layernorm_backward dinp");
  EXPECT_EQ(lwf, lwh);
  EXPECT_EQ(lbf, lbh);

  F.gelu_forward(of.data(), x.f.data(), NC);
  H.gelu_forward(oh.data(), x.h.data(), NC);
  expect_rounded(oh, of, "gelu_forward");
  F.gelu_backward(of.data(), dout.f.data(), x.f.data(), NC);
  H.gelu_backward(oh.data(), dout.h.data(), x.h.data(), NC);
  expect_rounded(oh, of, "gelu_backward");
  F.residual_forward(of.data(), x.f.data(), y.f.data(), NC);
  H.residual_forward(oh.data(), x.h.data(), y.h.data(), NC);
  expect_rounded(oh, of, "residual_forward");
  const PhiloxStream rng{11, 12};
  F.dropout_forward(of.data(), x.f.data(), 0.3f, rng, 5, N, C);
  H.dropout_forward(oh.data(), x.h.data(), 0.3f, rng, 5, N, C);
  expect_rounded(oh, of, "dropout_forward");
  F.dropout_backward(of.data(), dout.f.data(), 0.3f, rng, 5, N, C);
  H.dropout_backward(oh.data(), dout.h.data(), 0.3f, rng, 5, N, C);
  expect_rounded(oh, of, "dropout_backward");

  const size_t saved = F.attention_saved_elements(B, NH, T);
  std::vector<float> att(saved), att16(saved), scratch(saved), scratch16(saved);
  F.attention_forward(of.data(), att.data(), qkv.f.data(), B, T, C, NH, true, nullptr);
  H.attention_forward(oh.data(), att16.data(), qkv.h.data(), B, T, C, NH, true, nullptr);
  expect_rounded(oh, of, "attention_forward");
  std::vector<float> dq(NC * 3);
  std::vector<A> dq16(NC * 3);
  F.attention_backward(dq.data(), scratch.data(), dout.f.data(), of.data(), qkv.f.data(),
                       att.data(), B, T, C, NH, true, nullptr);
  H.attention_backward(dq16.data(), scratch16.data(), dout.h.data(), oh.data(), qkv.h.data(),
                       att16.data(), B, T, C, NH, true, nullptr);
  expect_rounded(dq16, dq, "attention_backward");

  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 7) % V, targets[i] = (i * 5 + 3) % V;
  Exact<A> wte(size_t(V) * C, 9, 0.5f), wpe(size_t(T) * C, 10, 0.5f);
  F.embedding_forward(of.data(), tokens.data(), wte.f.data(), wpe.f.data(), B, T, C);
  H.embedding_forward(oh.data(), tokens.data(), wte.h.data(), wpe.h.data(), B, T, C);
  expect_rounded(oh, of, "embedding_forward");
  std::vector<float> dwte(size_t(V) * C), dwpe(size_t(T) * C), dwte16(dwte), dwpe16(dwpe);
  F.embedding_backward(dwte.data(), dwpe.data(), dout.f.data(), tokens.data(), B, T, C);
  H.embedding_backward(dwte16.data(), dwpe16.data(), dout.h.data(), tokens.data(), B, T, C);
  EXPECT_EQ(dwte, dwte16);
  EXPECT_EQ(dwpe, dwpe16);

  std::vector<float> losses(N), lse(N), losses16(N), lse16(N), dl(size_t(N) * V);
  std::vector<A> dl16(size_t(N) * V);
  F.crossentropy_forward(losses.data(), lse.data(), logits.f.data(), targets.data(), N, V);
  H.crossentropy_forward(losses16.data(), lse16.data(), logits.h.data(), targets.data(), N, V);
  EXPECT_EQ(losses, losses16);
  EXPECT_EQ(lse, lse16);
  F.crossentropy_backward(dl.data(), logits.f.data(), lse.data(), targets.data(), 0.25f, N, V);
  H.crossentropy_backward(dl16.data(), logits.h.data(), lse.data(), targets.data(), 0.25f, N, V);
  expect_rounded(dl16, dl, "crossentropy_backward");

  std::vector<A> r(NC);
  H.round_weights(r.data(), x.f.data(), NC);
  expect_rounded(r, x.f, "round_weights");
}

// The convolutional families' layers (conv, ghost-group batch norm, pooling): the same rule.
template <class A>
void check_cnn_layers_round_the_float_layers() {
  const LayerOps& F = cpu_layer_ops();
  const LayerOpsT<A>& H = layer_ops<A>(Device::cpu);
  const cpu::Conv2dShape s{4, 8, 6, 6, 8, 3, 3, 1, 1};  // channels suit oneDNN's kernels
  const int N = s.N, C = s.OC, HW = s.OH() * s.OW(), G = 2;
  const size_t in = size_t(N) * s.IC * s.H * s.W, out = size_t(N) * C * HW, nw = 8 * 8 * 9;
  Exact<A> x(in, 21, 1.0f), w(nw, 22, 0.3f), dy(out, 23, 0.5f), g(C, 24, 1.0f), b(C, 25, 0.2f);
  const auto fp = F.conv2d_plan(s);
  const auto hp = H.conv2d_plan(s);
  std::vector<float> wsf(F.conv2d_workspace(fp.get()) + 1), of(out), dif(in), dwf(nw), dwh(nw);
  std::vector<A> wsh(H.conv2d_workspace(hp.get()) + 1), oh(out), dih(in);
  ASSERT_EQ(wsh.size() - 1, (wsf.size() - 1) * sizeof(float) / sizeof(A)) << "the same bytes";
  F.conv2d_forward(of.data(), wsf.data(), x.f.data(), w.f.data(), fp.get(), N);
  H.conv2d_forward(oh.data(), wsh.data(), x.h.data(), w.h.data(), hp.get(), N);
  expect_rounded(oh, of, "conv2d_forward");
  // The weight gradient (+=): the call's own rounded to A, as cuDNN writes it, added in fp32.
  const std::vector<float> before = Exact<A>(nw, 27, 0.1f).f;
  dwh = before;
  F.conv2d_backward(dif.data(), dwf.data(), wsf.data(), dy.f.data(), x.f.data(), w.f.data(),
                    fp.get(), N);
  H.conv2d_backward(dih.data(), dwh.data(), wsh.data(), dy.h.data(), x.h.data(), w.h.data(),
                    hp.get(), N);
  expect_rounded(dih, dif, "conv2d_backward dinp");
  std::vector<A> call(nw);
  round_to(call.data(), dwf.data(), nw);
  std::vector<float> want(nw);
  widen(want.data(), call.data(), nw);
  for (size_t k = 0; k < nw; ++k) want[k] = before[k] + want[k];
  EXPECT_EQ(dwh, want) << "conv2d_backward: the call's weight gradient rounded, then summed";

  Exact<A> conv(out, 26, 2.0f);
  const size_t groups = size_t(N / G) * C;
  std::vector<float> mf(groups), rf(groups), mh(groups), rh(groups);
  F.batchnorm2d_forward(of.data(), mf.data(), rf.data(), conv.f.data(), g.f.data(), b.f.data(), N,
                        C, HW, G, 1e-5f);
  H.batchnorm2d_forward(oh.data(), mh.data(), rh.data(), conv.h.data(), g.h.data(), b.h.data(), N,
                        C, HW, G, 1e-5f);
  expect_rounded(oh, of, "batchnorm2d_forward");
  EXPECT_EQ(mf, mh);
  EXPECT_EQ(rf, rh);
  std::vector<float> dgf(C), dbf(C), dgh(C), dbh(C), dof(out);
  std::vector<A> doh(out);
  F.batchnorm2d_backward(dof.data(), dgf.data(), dbf.data(), dy.f.data(), conv.f.data(), g.f.data(),
                         mf.data(), rf.data(), N, C, HW, G);
  H.batchnorm2d_backward(doh.data(), dgh.data(), dbh.data(), dy.h.data(), conv.h.data(), g.h.data(),
                         mh.data(), rh.data(), N, C, HW, G);
  expect_rounded(doh, dof, "batchnorm2d_backward");
  EXPECT_EQ(dgf, dgh);
  EXPECT_EQ(dbf, dbh);
  std::vector<float> run_mean(C, 0.25f), run_var(C, 1.5f);
  F.batchnorm2d_forward_eval(of.data(), conv.f.data(), g.f.data(), b.f.data(), run_mean.data(),
                             run_var.data(), N, C, HW, 1e-5f);
  H.batchnorm2d_forward_eval(oh.data(), conv.h.data(), g.h.data(), b.h.data(), run_mean.data(),
                             run_var.data(), N, C, HW, 1e-5f);
  expect_rounded(oh, of, "batchnorm2d_forward_eval");
  EXPECT_EQ(H.batchnorm2d_add_relu_forward, nullptr) << "16 bits round bn, sum and relu apart";

  const cpu::Pool2dShape ps{N, C, s.OH(), s.OW(), 2, 2, 0};
  const size_t pooled = size_t(N) * C * ps.OH() * ps.OW();
  std::vector<int32_t> af(pooled), ah(pooled);
  F.maxpool2d_forward(of.data(), af.data(), conv.f.data(), ps);
  H.maxpool2d_forward(oh.data(), ah.data(), conv.h.data(), ps);
  of.resize(pooled);
  oh.resize(pooled);
  expect_rounded(oh, of, "maxpool2d_forward");
  EXPECT_EQ(af, ah);
  F.maxpool2d_backward(dof.data(), dy.f.data(), af.data(), ps);
  H.maxpool2d_backward(doh.data(), dy.h.data(), ah.data(), ps);
  expect_rounded(doh, dof, "maxpool2d_backward");
  of.resize(size_t(N) * C);
  oh.resize(size_t(N) * C);
  F.global_avgpool_forward(of.data(), conv.f.data(), N, C, HW);
  H.global_avgpool_forward(oh.data(), conv.h.data(), N, C, HW);
  expect_rounded(oh, of, "global_avgpool_forward");
  F.global_avgpool_backward(dof.data(), dy.f.data(), N, C, HW);
  H.global_avgpool_backward(doh.data(), dy.h.data(), N, C, HW);
  expect_rounded(doh, dof, "global_avgpool_backward");
}

}  // namespace

TEST(Precision, Bf16CpuLayersAreTheFloatLayersRounded) {
  check_layers_round_the_float_layers<bf16_t>();
}
TEST(Precision, Fp16CpuLayersAreTheFloatLayersRounded) {
  check_layers_round_the_float_layers<fp16_t>();
}
TEST(Precision, Bf16CpuConvolutionLayersAreTheFloatLayersRounded) {
  check_cnn_layers_round_the_float_layers<bf16_t>();
}
TEST(Precision, Fp16CpuConvolutionLayersAreTheFloatLayersRounded) {
  check_cnn_layers_round_the_float_layers<fp16_t>();
}

// cpu-staged's 16-bit tables are the CPU's layers under a device's paths (its models upload,
// download and stage as on a GPU; tests/e2e/staged_device_matrix.sh compares the runs), each a
// device call that runs the CPU's function on the real pages of its device addresses
// (base/staged_memory.hpp): the CPU's bits, on host memory as on those addresses.
template <class A>
void check_staged_16_is_the_cpus() {
  const LayerOpsT<A>& S = layer_ops<A>(Device::cpu_staged);
  const LayerOpsT<A>& C = layer_ops<A>(Device::cpu);
  EXPECT_EQ(S.device, Device::cpu_staged);
  EXPECT_EQ(C.device, Device::cpu);
  EXPECT_EQ(S.batchnorm2d_add_relu_forward, nullptr);
  const int N = 5, IC = 8, OC = 6;
  const Exact<A> x(size_t(N) * IC, 3, 1.0f), w(size_t(OC) * IC, 4, 0.3f), b(size_t(OC), 5, 0.1f);
  std::vector<A> cpu(size_t(N) * OC), staged(size_t(N) * OC);
  C.linear_forward(cpu.data(), x.h.data(), w.h.data(), b.h.data(), N, IC, OC);
  S.linear_forward(staged.data(), x.h.data(), w.h.data(), b.h.data(), N, IC, OC);
  for (size_t i = 0; i < cpu.size(); ++i) ASSERT_EQ(staged[i].bits, cpu[i].bits) << i;
}
TEST(Precision, CpuStagedSixteenBitLayersAreTheCpus) {
  check_staged_16_is_the_cpus<bf16_t>();
  check_staged_16_is_the_cpus<fp16_t>();
}

namespace {

using precision_test::GptRun;
using precision_test::relative_l2;

GptRun run_gpt(DType precision, float dloss, float param_scale = 1.0f) {
  return precision_test::run_gpt({2, 4, 64, 16, 256}, 2, 16, precision, dloss, DeviceAllocator{},
                                 cpu_layer_ops(), param_scale);
}

}  // namespace

// Each layer rounds its outputs once: bf16 keeps 8 significant bits (relative rounding error up
// to 2^-9), fp16 11 (2^-12). Through 2 blocks the loss stays within one such error of fp32's (the
// per-element errors mostly cancel in the mean), and the gradient as a whole (relative L2) within
// eight (seen: about three).
TEST(Precision, GptInSixteenBitsTracksFp32) {
  const float dloss = 1.0f / 32;
  const GptRun f32 = run_gpt(DType::f32, dloss), bf = run_gpt(DType::bf16, dloss),
               h = run_gpt(DType::f16, dloss);
  std::printf("loss fp32 %.7f bf16 %.7f fp16 %.7f; gradient relative L2 bf16 %.2e fp16 %.2e\n",
              f32.loss, bf.loss, h.loss, relative_l2(bf.grads, f32.grads),
              relative_l2(h.grads, f32.grads));
  EXPECT_NEAR(bf.loss, f32.loss, 0x1p-9 * f32.loss);
  EXPECT_NEAR(h.loss, f32.loss, 0x1p-12 * f32.loss);
  EXPECT_NE(bf.loss, f32.loss) << "bf16 storage changed nothing: is it fp32?";
  EXPECT_NE(h.loss, f32.loss);
  EXPECT_LT(relative_l2(bf.grads, f32.grads), 8 * 0x1p-9);
  EXPECT_LT(relative_l2(h.grads, f32.grads), 8 * 0x1p-12);
  EXPECT_GT(relative_l2(bf.grads, f32.grads), relative_l2(h.grads, f32.grads));
}

// The layers read the rounded copy: changed parameters reach them through parameters_changed.
TEST(Precision, LayersReadTheWeightsRoundedAfterParametersChange) {
  const float dloss = 1.0f / 32;
  const GptRun f32 = run_gpt(DType::f32, dloss, 0.5f), bf = run_gpt(DType::bf16, dloss, 0.5f),
               bf_unscaled = run_gpt(DType::bf16, dloss);
  std::printf("params x0.5: loss fp32 %.7f bf16 %.7f; bf16 unscaled %.7f\n", f32.loss, bf.loss,
              bf_unscaled.loss);
  EXPECT_NEAR(bf.loss, f32.loss, 0x1p-9 * f32.loss);
  EXPECT_GT(std::abs(bf_unscaled.loss - f32.loss), 10 * std::abs(bf.loss - f32.loss))
      << "the layers still read the weights from before the change";
}

// fp16's largest finite value is 65504: a large enough loss gradient overflows the activation
// gradients (what dynamic loss scaling detects and skips); bf16 has fp32's range and does not.
TEST(Precision, Fp16OverflowsWhereBf16DoesNot) {
  auto finite = [](const std::vector<float>& g) {
    for (float x : g)
      if (!std::isfinite(x)) return false;
    return true;
  };
  EXPECT_TRUE(finite(run_gpt(DType::f16, 1.0f / 32).grads));
  EXPECT_FALSE(finite(run_gpt(DType::f16, 1e6f).grads));
  EXPECT_TRUE(finite(run_gpt(DType::bf16, 1e6f).grads));
}
