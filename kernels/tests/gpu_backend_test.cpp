// GPU tests (label `gpu`): skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/bf16.h"
#include "kernels/device_peaks.h"
#include "kernels/gate_rows.h"
#include "kernels/native_tile_rule.h"
#include "kernels/stimulus.h"
#include "kernels/tests/cuda_testing.h"
#include "kernels/workload.h"

namespace moe {
namespace {

// Sets an environment variable (a HARNESS_NATIVE_* diagnostic) for its lifetime and then restores
// what was there, so that a failed assertion never leaves a forced tile or schedule to the tests
// after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {  // destructors do not throw: a failed restore shows in the next test
    if (old_)
      (void)setenv(name_, old_->c_str(), 1);
    else
      (void)unsetenv(name_);
  }
  void set(const char* value) const {
    if (setenv(name_, value, 1) != 0) throw std::runtime_error(std::string("setenv ") + name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// What making spec's workload with the diagnostic name=value set threw as invalid_argument, or ""
// where it was accepted (the weights are made before it is set).
std::string refusal_with(const char* name, const char* value, Backend& backend,
                         const WorkloadSpec& spec) {
  const auto weights = backend.make_weights(spec);
  const ScopedEnv forced(name, value);
  try {
    (void)backend.make(spec, weights);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

#define REQUIRE_GPU()                                               \
  do {                                                              \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (false)

bool has_nonzero(const std::vector<float>& v) {
  return std::any_of(v.begin(), v.end(), [](float f) { return f != 0.0f; });
}

class GpuBackend : public ::testing::TestWithParam<std::string> {};

// The tiny model with H = 72 (not a multiple of the 64/128-wide K steps or W2's 128-feature
// blocks) and I = 40 (not a multiple of the feature tiles): every native tile is partial.
ModelGeometry odd_tiny() {
  auto g = *find_preset("tiny");
  g.hidden = 72;
  g.intermediate = 40;
  return g;
}

void expect_matches_reference(const std::string& name, const ModelGeometry& g, const Target& t,
                              Component c, GridPoint p, int banks = 1) {
  auto backend = make_cuda_backend(name, 0);
  WorkloadSpec spec{g, t, c, p, banks, 12345 + static_cast<std::uint64_t>(p.tokens)};
  auto w = backend->make(spec, backend->make_weights(spec));
  const auto errors = w->verify();
  ASSERT_EQ(errors.size(), static_cast<std::size_t>(c == Component::experts ? banks : 1));
  for (std::size_t b = 0; b < errors.size(); ++b)
    EXPECT_LE(errors[b], backend->tolerance())
        << name << " " << to_string(c) << " N=" << p.tokens << " A=" << p.activated
        << " M=" << p.assignments << " bank " << b;
  EXPECT_FALSE(w->take_route_error());
}

TEST_P(GpuBackend, EveryComponentMatchesItsReference) {
  REQUIRE_GPU();
  const auto expect_matches_reference = [&](const ModelGeometry& g, const Target& t, Component c,
                                            GridPoint p, int banks = 1) {
    ::moe::expect_matches_reference(GetParam(), g, t, c, p, banks);
  };
  const auto tiny = *find_preset("tiny");
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto ds = *find_preset("deepseek-v3");
  const Target ep2{1, 2, 2, 1, false}, ep1{1, 1, 1, 0, false};
  for (auto n : {1, 7, 64, 300})
    expect_matches_reference(qwen, ep2, Component::gate_routing, {n, 0, 0});
  expect_matches_reference(ds, ep1, Component::gate_routing, {33, 0, 0});   // fp32 router
  expect_matches_reference(qwen, ep2, Component::experts, {1, 1, 1}, 4);    // N=1, A=1, M=A
  expect_matches_reference(qwen, ep2, Component::experts, {16, 1, 16}, 4);  // A=1
  expect_matches_reference(qwen, ep2, Component::experts, {16, 5, 5}, 2);   // M=A
  expect_matches_reference(qwen, ep2, Component::experts, {64, 64, 256}, 2);
  expect_matches_reference(qwen, ep2, Component::experts, {64, 0, 0}, 2);  // all remote
  expect_matches_reference(qwen, ep1, Component::experts, {512, 128, 4096}, 2);
  expect_matches_reference(tiny, ep1, Component::experts, {5, 8, 10}, 2);
  const Target tiny_ep2{1, 2, 2, 0, false};
  for (GridPoint p :
       {GridPoint{32, 4, 64}, GridPoint{128, 4, 256}, GridPoint{2, 1, 2}, GridPoint{64, 3, 100}})
    expect_matches_reference(tiny, tiny_ep2, Component::experts, p, 8);
  expect_matches_reference(qwen, ep2, Component::finalize_copy, {100, 0, 0});
  expect_matches_reference(ds, ep1, Component::wrapper, {17, 0, 0});
  expect_matches_reference(tiny, ep1, Component::wrapper, {3, 0, 0});
}

TEST_P(GpuBackend, InvalidRoutesEqualThePaddingOracleAndRaiseTheFlag) {
  REQUIRE_GPU();
  const auto run_experts_on_device = [&](auto&&... args) {
    return ::moe::run_experts_on_device(GetParam(), args...);
  };
  auto g = *find_preset("tiny");
  const Target t{1, 1, 1, 0, false};
  Rng rng(99);
  const int rows = 4;
  const auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
  const auto w = random_mlp(g.experts, g.hidden, g.intermediate, Dtype::bf16, rng);
  const Routes valid{
      rows, 2, {0, 1, 2, 3, 4, 5, 6, 7}, {0.5f, 0.5f, 0.4f, 0.6f, 0.3f, 0.7f, 0.2f, 0.8f}};
  const auto base = run_experts_on_device(0, g, t, x, valid, w);
  EXPECT_FALSE(base.route_error);
  ASSERT_TRUE(has_nonzero(base.out));
  struct Case {
    const char* name;
    int lane;
    int id;
    float weight;
  };
  for (const auto& c :
       {Case{"NaN", 1, 1, NAN}, Case{"+Inf", 2, 2, INFINITY}, Case{"-Inf", 3, 3, -INFINITY},
        Case{"negative", 4, 4, -0.1f}, Case{"id=E", 5, 8, 0.7f}, Case{"id=-2", 6, -2, 0.2f}}) {
    Routes bad = valid, pad = valid;
    bad.ids[c.lane] = c.id;
    bad.weights[c.lane] = c.weight;
    pad.ids[c.lane] = -1;
    pad.weights[c.lane] = 0.0f;
    const auto got = run_experts_on_device(0, g, t, x, bad, w);
    const auto want = run_experts_on_device(0, g, t, x, pad, w);
    EXPECT_TRUE(got.route_error) << c.name;
    EXPECT_FALSE(want.route_error) << c.name;
    EXPECT_EQ(got.out, want.out) << c.name;
  }
  Routes all_bad = valid;
  for (auto& id : all_bad.ids) id = 99;
  const auto none = run_experts_on_device(0, g, t, x, all_bad, w);
  EXPECT_TRUE(none.route_error);
  for (float v : none.out) EXPECT_EQ(v, 0.0f);
  Routes dup = valid;
  dup.ids[1] = dup.ids[0];  // duplicate routes stay legal
  EXPECT_FALSE(run_experts_on_device(0, g, t, x, dup, w).route_error);
}

// Rows whose routes differ from the reference: the weight of some expert (0 if not chosen)
// differs by more than 1e-2 of the row's largest weight. Summation order may flip a near-tie
// between the k-th and (k+1)-th expert, hence the count rather than a bitwise comparison.
int rows_unlike_reference(const Routes& got, const Routes& want, int experts) {
  int unlike = 0;
  for (int r = 0; r < want.rows; ++r) {
    std::vector<float> g(static_cast<std::size_t>(experts)), w(g.size());
    float top = 0.0f;
    for (int j = 0; j < want.k; ++j) {
      const std::size_t i = static_cast<std::size_t>(r) * want.k + j;
      const int gid = got.ids[i], wid = want.ids[i];
      if (gid < -1 || gid >= experts) return want.rows + 1;  // out of range: never acceptable
      if (gid >= 0) g[static_cast<std::size_t>(gid)] += got.weights[i];
      if (wid >= 0) w[static_cast<std::size_t>(wid)] += want.weights[i];
      top = std::max(top, want.weights[i]);
    }
    for (int e = 0; e < experts; ++e)
      if (std::abs(g[static_cast<std::size_t>(e)] - w[static_cast<std::size_t>(e)]) >
          1e-2f * std::max(top, 1e-6f)) {
        ++unlike;
        break;
      }
  }
  return unlike;
}

struct GateCase {
  ModelGeometry g;
  int rows;
};

// Models and row counts that cover the top-k kernel's 4, 8 and 32 logits per lane, E not a
// multiple of 32, K not a multiple of the GEMM tiles, and fp32 routers (three bf16 planes).
std::vector<GateCase> gate_cases() {
  const auto qwen = *find_preset("qwen3-30b-a3b");
  auto odd = *find_preset("tiny");
  odd.experts = 60, odd.top_k = 6, odd.hidden = 72;
  auto wide_bf16 = *find_preset("tiny");
  wide_bf16.experts = 200, wide_bf16.top_k = 8, wide_bf16.hidden = 128;
  auto many = wide_bf16;
  many.experts = 300;
  auto odd_fp32 = odd;
  odd_fp32.router_dtype = Dtype::fp32, odd_fp32.hidden = 128;
  return {{qwen, 1},
          {qwen, 33},
          {qwen, 300},
          {qwen, 1000},
          {qwen, 1500},
          {qwen, 4096},
          {*find_preset("qwen3-235b-a22b"), 700},
          {*find_preset("deepseek-v3"), 5},
          {*find_preset("deepseek-v3"), 1100},
          {*find_preset("tiny"), 50},
          {odd, 130},
          {odd_fp32, 97},
          {wide_bf16, 77},
          {many, 40}};
}

// Fresh random hidden states and router (in the router's dtype) and the CPU reference's routes.
struct GateInputs {
  std::vector<float> x, router;
  Routes want;
};
GateInputs gate_inputs(const ModelGeometry& g, int rows, std::uint64_t seed) {
  Rng rng(seed + static_cast<std::uint64_t>(rows) + static_cast<std::uint64_t>(g.experts));
  GateInputs in;
  in.x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
  in.router = random_values(static_cast<std::size_t>(g.experts) * g.hidden,
                            1.0f / std::sqrt(static_cast<float>(g.hidden)), g.router_dtype, rng);
  gate_routing_ref(in.x, rows, in.router, g, in.want);
  return in;
}

TEST_P(GpuBackend, GateRoutesEveryRowLikeTheReference) {
  REQUIRE_GPU();
  for (const auto& [g, rows] : gate_cases()) {
    const auto [x, router, want] = gate_inputs(g, rows, 1000);
    const auto got = run_gate_on_device(GetParam(), 0, g, x, router);
    const std::string what = g.name + " E=" + std::to_string(g.experts) +
                             " H=" + std::to_string(g.hidden) + " N=" + std::to_string(rows);
    EXPECT_FALSE(got.route_error) << what;
    ASSERT_EQ(got.routes.ids.size(), want.ids.size()) << what;
    EXPECT_LE(rows_unlike_reference(got.routes, want, g.experts), 1) << what;
  }
}

// The router GEMM runs on gate_gemm_rows of the device's SMs (padding rows of x it reads; the
// NaN padding of run_gate_on_device checks that they reach no routed row): fewer than 8 rows as
// they are, up to 256 rounded up to 8, up to 2048 to 64, above that padded to the band's end. The
// configuration names the GEMM's rows, and the padded points verify against the reference through
// the workload (its x padding rows random).
TEST_P(GpuBackend, GateGemmRowsFollowTheRowRule) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const Target ep1{1, 1, 1, 0, false};
  auto backend = make_cuda_backend(GetParam(), 0);
  const int sms = backend->sm_count();
  ASSERT_GT(sms, 0);
  const std::int64_t band = gate_band_rows(sms);
  for (const std::int64_t tokens :
       {std::int64_t{5}, std::int64_t{8}, std::int64_t{9}, std::int64_t{256}, std::int64_t{257},
        std::int64_t{1601}, std::int64_t{2048}, std::int64_t{2049}, 4 * band, 4 * band + 1,
        8 * band - 3}) {
    const auto gemm_rows = gate_gemm_rows(tokens, sms);
    const std::string want =
        gemm_rows == tokens ? "" : "router GEMM on " + std::to_string(gemm_rows) + " rows";
    const WorkloadSpec spec{qwen, ep1, Component::gate_routing, {tokens, 0, 0}, 1, 1};
    EXPECT_EQ(backend->make(spec, backend->make_weights(spec))->configuration(), want) << tokens;
    expect_matches_reference(GetParam(), qwen, ep1, Component::gate_routing, {tokens, 0, 0});
  }
}

// A NaN in a token's hidden state makes its routes invalid: padding and the flag, the other
// rows untouched (docs/measurement.md).
TEST_P(GpuBackend, GateTurnsNanRowsIntoPaddingAndRaisesTheFlag) {
  REQUIRE_GPU();
  for (const auto& g : {*find_preset("qwen3-30b-a3b"), *find_preset("deepseek-v3")}) {
    const int rows = 70;
    Rng rng(5);
    auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
    const auto router =
        random_values(static_cast<std::size_t>(g.experts) * g.hidden,
                      1.0f / std::sqrt(static_cast<float>(g.hidden)), g.router_dtype, rng);
    x[static_cast<std::size_t>(3) * g.hidden + 17] = NAN;
    Routes want;
    gate_routing_ref(x, rows, router, g, want);
    const auto got = run_gate_on_device(GetParam(), 0, g, x, router);
    EXPECT_TRUE(got.route_error) << g.name;
    for (int j = 0; j < g.top_k; ++j) {
      EXPECT_EQ(got.routes.ids[static_cast<std::size_t>(3) * g.top_k + j], -1) << g.name;
      EXPECT_EQ(got.routes.weights[static_cast<std::size_t>(3) * g.top_k + j], 0.0f) << g.name;
    }
    EXPECT_LE(rows_unlike_reference(got.routes, want, g.experts), 1) << g.name;
  }
}

// The top-k kernel holds at most 32 logits per lane and one route per lane: larger E or k is
// refused with the limits named.
TEST_P(GpuBackend, GateRejectsRoutersItDoesNotCover) {
  REQUIRE_GPU();
  auto g = *find_preset("tiny");
  const auto expect_refused = [&](const ModelGeometry& bad, const std::string& what) {
    Rng rng(3);
    const auto x = random_values(static_cast<std::size_t>(2) * bad.hidden, 1.0f, Dtype::bf16, rng);
    const auto router = random_values(static_cast<std::size_t>(bad.experts) * bad.hidden, 0.1f,
                                      bad.router_dtype, rng);
    try {
      (void)run_gate_on_device(GetParam(), 0, bad, x, router);
      ADD_FAILURE() << what << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("E <= 1024 and k <= min(32, E)"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto many = g;
  many.experts = 1025;
  expect_refused(many, "E=1025");
  auto wide_k = g;
  wide_k.experts = 64, wide_k.top_k = 33;
  expect_refused(wide_k, "k=33");
}

TEST_P(GpuBackend, GateForwardIsCapturableInACudaGraphAndDeterministic) {
  REQUIRE_GPU();
  for (const auto& [g, rows] : {GateCase{*find_preset("qwen3-30b-a3b"), 300},
                                GateCase{*find_preset("deepseek-v3"), 1100}}) {
    Rng rng(11);
    const auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
    const auto router =
        random_values(static_cast<std::size_t>(g.experts) * g.hidden,
                      1.0f / std::sqrt(static_cast<float>(g.hidden)), g.router_dtype, rng);
    const auto direct = run_gate_on_device(GetParam(), 0, g, x, router);
    const auto graphed = run_gate_on_device(GetParam(), 0, g, x, router, true);
    EXPECT_EQ(direct.routes.ids, graphed.routes.ids) << g.name;
    EXPECT_EQ(direct.routes.weights, graphed.routes.weights) << g.name;
    EXPECT_FALSE(graphed.route_error) << g.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuBackend, ::testing::Values("cublas_grouped", "native"));

// A mean SM clock from the stamps is a real clock: above 100 MHz and at most the GPU's maximum
// (NVML, where the driver has it; 2 % for the two timers' granularity).
void expect_a_real_sm_clock(double mhz, const Backend& backend) {
  EXPECT_GT(mhz, 100.0) << "no stamp, or stamps of different SMs";
  const auto state = backend.live_state();
  if (const auto max = state.find("sm_clock_max_mhz"); max != state.end()) {
    EXPECT_LE(mhz, 1.02 * std::stod(max->second)) << "max " << max->second << " MHz";
  }
}

// Two clock stamps around timed forwards give the mean SM clock the device counted over them:
// a real clock, at most the GPU's maximum (NVML, where the driver has it), and later stamps count
// on from earlier ones.
TEST(CudaBackend, ClockStampsGiveTheMeanSmClockOfAnInterval) {
  REQUIRE_GPU();
  auto backend = make_cuda_backend("native", 0);
  const WorkloadSpec spec{*find_preset("qwen3-30b-a3b"),
                          Target{1, 1, 1, 0, false},
                          Component::experts,
                          GridPoint{1024, 128, 8192},
                          2,
                          31};
  auto w = backend->make(spec, backend->make_weights(spec));
  const auto from = backend->clock_stamp();
  for (int i = 0; i < 20; ++i) w->forward(i % spec.banks);
  w->synchronize();
  const auto to = backend->clock_stamp();
  ASSERT_TRUE(from.has_value() && to.has_value()) << "no block of the stamp kernel ran on SM 0";
  EXPECT_GT(to->ns, from->ns + 1'000'000);  // 20 forwards of about 0.3 ms each
  const auto mhz = mean_sm_clock_mhz(*from, *to);
  ASSERT_TRUE(mhz.has_value());
  expect_a_real_sm_clock(*mhz, *backend);
}

// The floors' denominators: a copy and a GEMM that moved bytes and did flops, and the GEMM's mean
// SM clock from the same stamps as above, a real clock at most the GPU's maximum.
TEST(DevicePeaks, MeasureTheCopyTheGemmAndTheGemmsClock) {
  REQUIRE_GPU();
  const auto peaks = measure_device_peaks(0, 3);
  EXPECT_GT(peaks.copy_bytes_per_s, 0.0);
  EXPECT_GT(peaks.bf16_flops_per_s, 0.0);
  EXPECT_EQ(peaks.gemm_size, 8192);
  expect_a_real_sm_clock(peaks.gemm_sm_clock_mhz, *make_cuda_backend("native", 0));
}

// The native kernels pick a tile by expected rows per expert (the cost rule); cover the rule's
// choices, then every tile forced (HARNESS_NATIVE_TILE) at one, a few and many tiles per expert
// with partial tiles, odd shapes (partial tiles in rows, features and K) and models with wider H
// and I.
TEST(NativeBackend, EveryTileMatchesTheReference) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto big = *find_preset("qwen3-235b-a22b");
  const Target ep1{1, 1, 1, 0, false}, ep4{2, 2, 4, 3, false};
  for (const GridPoint p :
       {GridPoint{1, 8, 8}, GridPoint{200, 128, 1600}, GridPoint{700, 128, 5600},
        GridPoint{1400, 128, 11200}, GridPoint{2048, 128, 16384}, GridPoint{2400, 100, 19200},
        GridPoint{3000, 17, 24000}})
    expect_matches_reference("native", qwen, ep1, Component::experts, p, 2);
  expect_matches_reference("native", big, ep4, Component::experts, {64, 30, 200}, 2);
  expect_matches_reference("native", big, ep4, Component::experts, {4096, 32, 8192}, 2);
  const auto odd = odd_tiny();
  for (const auto tile : kNativeTiles) {
    SCOPED_TRACE(to_string(tile));
    const ScopedEnv forced("HARNESS_NATIVE_TILE", to_string(tile));
    // 112, 384 and 3000 rows per expert: one partial tile, several, many.
    for (const GridPoint p :
         {GridPoint{1400, 100, 11200}, GridPoint{2400, 50, 19200}, GridPoint{3000, 8, 24000}})
      expect_matches_reference("native", qwen, ep1, Component::experts, p, 2);
    for (GridPoint p : {GridPoint{3, 2, 6}, GridPoint{300, 8, 600}, GridPoint{1000, 8, 2000}})
      expect_matches_reference("native", odd, ep1, Component::experts, p, 2);
  }
}

// Where the tiles are paired and an expert's rows fit one tall tile (129-256 rows), W2 runs on
// tiles of 128 features x 160, 192, 224 or 256 tokens from a tile table of its own: each height
// at a mean that mixes experts of two row counts, and the odd shapes (H = 72: a partial feature
// block; I = 40: a partial K step). The persistent-schedule test checks it bit for bit against
// the two launches (the clustered schedule at 75 rows per expert on the medium tile).
TEST(NativeBackend, W2OnTallTilesMatchesTheReference) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto odd = odd_tiny();
  const Target ep1{1, 1, 1, 0, false}, ep4{2, 2, 4, 3, false};
  auto backend = make_cuda_backend("native", 0);
  for (const auto& [p, tokens] : {std::pair{GridPoint{580, 32, 4640}, 160},      // 145 rows
                                  std::pair{GridPoint{670, 31, 5300}, 192},      // 171.0
                                  std::pair{GridPoint{845, 32, 6760}, 224},      // 211.3
                                  std::pair{GridPoint{1000, 32, 8000}, 256}}) {  // 250
    expect_matches_reference("native", qwen, ep4, Component::experts, p, 2);
    const WorkloadSpec s{qwen, ep4, Component::experts, p, 2, 1};
    const auto config = backend->make(s, backend->make_weights(s))->configuration();
    EXPECT_NE(config.find(", W2 on 128 x " + std::to_string(tokens) + " tiles"), std::string::npos)
        << config;
  }
  for (const GridPoint p : {GridPoint{600, 8, 1200}, GridPoint{1000, 8, 2000}})  // 150, 250 rows
    expect_matches_reference("native", odd, ep1, Component::experts, p, 2);
}

// The split160 experiment (HARNESS_NATIVE_TILE=split160, not among kNativeTiles): 87.5, 128, 144.6
// and 160 rows per expert (the tail empty, unused, partly and wholly used), many tiles per expert,
// and the odd shapes (H = 72: a partial feature block; I = 40: a partial K step).
TEST(NativeBackend, Split160TileMatchesTheReference) {
  REQUIRE_GPU();
  const ScopedEnv forced("HARNESS_NATIVE_TILE", "split160");
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const Target ep1{1, 1, 1, 0, false};
  for (const GridPoint p :
       {GridPoint{1400, 128, 11200}, GridPoint{2048, 128, 16384}, GridPoint{2314, 128, 18512},
        GridPoint{2560, 128, 20480}, GridPoint{3000, 17, 24000}})
    expect_matches_reference("native", qwen, ep1, Component::experts, p, 2);
  const auto odd = odd_tiny();
  for (const GridPoint p : {GridPoint{3, 2, 6}, GridPoint{300, 8, 600}, GridPoint{1000, 8, 2000}})
    expect_matches_reference("native", odd, ep1, Component::experts, p, 2);
  auto backend = make_cuda_backend("native", 0);
  const WorkloadSpec spec{qwen, ep1, Component::experts, {2314, 128, 18512}, 2, 1};
  const auto config = backend->make(spec, backend->make_weights(spec))->configuration();
  EXPECT_EQ(config.rfind("split160 tile (160 tokens, wgmma, pipelined, W2 on 128 x 160 tiles", 0),
            0u)
      << config;
  // Its kernels are the pipelined W13 and the tall W2 only: other schedules are refused.
  for (const auto& [name, value] : {std::pair{"HARNESS_NATIVE_SCHEDULE", "launches"},
                                    std::pair{"HARNESS_NATIVE_SCHEDULE", "clustered"},
                                    std::pair{"HARNESS_NATIVE_NO_WGMMA", "1"}}) {
    const auto error = refusal_with(name, value, *backend, spec);
    EXPECT_NE(error.find("the split160 tile runs on wgmma and pipelined only"), std::string::npos)
        << name << "=" << value << ": " << (error.empty() ? "accepted" : error);
  }
}

// Builds without sm_90a (or GPUs other than sm_90) run the medium and wide tiles on mma.sync;
// HARNESS_NATIVE_NO_WGMMA selects that path here too, so both stay checked.
TEST(NativeBackend, MmaSyncFallbackTilesMatchTheReference) {
  REQUIRE_GPU();
  const ScopedEnv no_wgmma("HARNESS_NATIVE_NO_WGMMA", "1");
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const Target ep1{1, 1, 1, 0, false};
  // 43.75, 75, 87.5, 106.25 and 128 rows per expert: the rule's medium, wide80, wide96, wide112
  // and wide tiles, each one partial tile per expert.
  for (const int rows : {700, 1200, 1400, 1700, 2048})
    expect_matches_reference("native", qwen, ep1, Component::experts, {rows, 128, rows * 8}, 2);
  // The 160-token tile, which only HARNESS_NATIVE_TILE runs: one partial tile per expert (87.5
  // rows) and many (3000 rows).
  const ScopedEnv forced("HARNESS_NATIVE_TILE", "wide160");
  for (const GridPoint p : {GridPoint{1400, 128, 11200}, GridPoint{3000, 8, 24000}})
    expect_matches_reference("native", qwen, ep1, Component::experts, p, 2);
}

// A few lanes: one plan block, the 64-lane boundary, several lanes per expert, remote lanes.
TEST(NativeBackend, SmallForwardsMatchTheReference) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto big = *find_preset("qwen3-235b-a22b");
  const Target ep1{1, 1, 1, 0, false}, ep2{1, 2, 2, 1, false}, ep4{2, 2, 4, 3, false};
  expect_matches_reference("native", qwen, ep1, Component::experts, {8, 20, 64}, 2);  // 64 lanes
  expect_matches_reference("native", qwen, ep1, Component::experts, {8, 64, 64}, 2);
  expect_matches_reference("native", big, ep4, Component::experts, {5, 3, 4}, 2);   // most remote
  expect_matches_reference("native", qwen, ep2, Component::experts, {3, 0, 0}, 2);  // all remote
  // Up to 16 lanes on the narrow tile the W13 blocks plan the routes themselves: 16 lanes, two per
  // expert (N = 2 allows no more), most remote, all remote; from 17 lanes plan_routes does.
  expect_matches_reference("native", qwen, ep1, Component::experts, {2, 8, 16}, 2);
  expect_matches_reference("native", big, ep4, Component::experts, {2, 3, 4}, 2);
  expect_matches_reference("native", qwen, ep2, Component::experts, {1, 0, 0}, 2);
  auto backend = make_cuda_backend("native", 0);
  for (const auto& [p, planned_in_gemm] :
       {std::pair{GridPoint{2, 8, 16}, true}, std::pair{GridPoint{3, 8, 24}, false}}) {
    const WorkloadSpec spec{qwen, ep1, Component::experts, p, 2, 1};
    const auto config = backend->make(spec, backend->make_weights(spec))->configuration();
    EXPECT_EQ(config.find("routes planned in the W13 blocks") != std::string::npos, planned_in_gemm)
        << config;
  }
}

// From 256 lanes the narrow tile loads its weights under L2 evict-first (a cache hint: the same
// values); the configuration says so, and both sides of the threshold match the reference.
TEST(NativeBackend, NarrowTileLoadsWeightsEvictFirstFromItsLaneThreshold) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const Target ep1{1, 1, 1, 0, false};
  auto backend = make_cuda_backend("native", 0);
  for (const auto& [p, evict_first] :
       {std::pair{GridPoint{31, 112, 248}, false}, std::pair{GridPoint{32, 112, 256}, true},
        std::pair{GridPoint{1024, 128, 8192}, false}}) {  // the medium tile: no hint
    const WorkloadSpec spec{qwen, ep1, Component::experts, p, 2, 1};
    const auto config = backend->make(spec, backend->make_weights(spec))->configuration();
    EXPECT_EQ(config.find("weights evict-first in L2") != std::string::npos, evict_first) << config;
    if (p.tokens < 1024) expect_matches_reference("native", qwen, ep1, Component::experts, p, 2);
  }
}

// The plan in the W13 blocks on the tiny model: 16 lanes on all 8 experts, a few lanes per
// expert, a partial feature block (H = 72, I = 40). Small enough for compute-sanitizer racecheck
// (tools/gpu-check.sh), which takes minutes on the real models.
TEST(NativeBackend, SmallForwardsOnTinyModels) {
  REQUIRE_GPU();
  const auto tiny = *find_preset("tiny");
  const auto odd = odd_tiny();
  const Target ep1{1, 1, 1, 0, false};
  auto backend = make_cuda_backend("native", 0);
  for (const auto& [g, p] :
       {std::pair{tiny, GridPoint{8, 8, 16}}, std::pair{tiny, GridPoint{4, 3, 8}},
        std::pair{odd, GridPoint{3, 2, 6}}}) {
    const WorkloadSpec spec{g, ep1, Component::experts, p, 2, 1};
    const auto config = backend->make(spec, backend->make_weights(spec))->configuration();
    EXPECT_NE(config.find("routes planned in the W13 blocks"), std::string::npos) << config;
    expect_matches_reference("native", g, ep1, Component::experts, p, 2);
  }
}

// One token row runs two launches (W13 with the plan, W2 with the combine): every lane local,
// fewer local lanes than warps (a lane's rows split along K over several warps), one local lane,
// none. From two token rows the narrow tile runs as before.
TEST(NativeBackend, OneTokenRunsTwoLaunchesThatMatchTheReference) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto big = *find_preset("qwen3-235b-a22b");
  const Target ep1{1, 1, 1, 0, false}, ep2{1, 2, 2, 1, false}, ep4{2, 2, 4, 3, false};
  auto backend = make_cuda_backend("native", 0);
  for (const auto& [p, one_token] :
       {std::pair{GridPoint{1, 8, 8}, true}, std::pair{GridPoint{2, 8, 16}, false}}) {
    const WorkloadSpec spec{qwen, ep1, Component::experts, p, 2, 1};
    const auto config = backend->make(spec, backend->make_weights(spec))->configuration();
    EXPECT_EQ(config.find("one token") != std::string::npos, one_token) << config;
    EXPECT_EQ(config.rfind("narrow tile (", 0), 0u) << config;  // the rule's tile comes first
  }
  expect_matches_reference("native", qwen, ep1, Component::experts, {1, 8, 8}, 2);
  expect_matches_reference("native", qwen, ep2, Component::experts, {1, 3, 3}, 2);
  expect_matches_reference("native", qwen, ep2, Component::experts, {1, 0, 0}, 2);
  for (const int local : {1, 2, 5})
    expect_matches_reference("native", big, ep4, Component::experts, {1, local, local}, 2);
}

// One token on the tiny model (small enough for compute-sanitizer racecheck, tools/gpu-check.sh):
// K not a multiple of a warp's 16-byte chunks (H = 72, I = 40), and an invalid lane, which becomes
// padding and raises the flag, as does a token with no valid lane (its output is zero).
TEST(NativeBackend, OneTokenOnTinyModels) {
  REQUIRE_GPU();
  const auto odd = odd_tiny();
  const Target t{1, 1, 1, 0, false}, ep2{1, 2, 2, 1, false};
  expect_matches_reference("native", odd, t, Component::experts, {1, 2, 2}, 2);
  expect_matches_reference("native", odd, ep2, Component::experts, {1, 1, 1}, 2);  // one remote
  Rng rng(17);
  const auto x = random_values(static_cast<std::size_t>(odd.hidden), 1.0f, Dtype::bf16, rng);
  const auto w = random_mlp(odd.experts, odd.hidden, odd.intermediate, Dtype::bf16, rng);
  const Routes valid{1, 2, {3, 6}, {0.3f, 0.7f}};
  Routes bad = valid, pad = valid, all_bad = valid;
  bad.weights[1] = NAN;
  pad.ids[1] = -1, pad.weights[1] = 0.0f;
  all_bad.ids = {8, -2};
  const auto base = run_experts_on_device("native", 0, odd, t, x, valid, w);
  const auto got = run_experts_on_device("native", 0, odd, t, x, bad, w);
  const auto want = run_experts_on_device("native", 0, odd, t, x, pad, w);
  const auto none = run_experts_on_device("native", 0, odd, t, x, all_bad, w);
  EXPECT_FALSE(base.route_error);
  ASSERT_TRUE(has_nonzero(want.out));
  EXPECT_NE(base.out, want.out);  // the padded lane contributed
  EXPECT_TRUE(got.route_error);
  EXPECT_FALSE(want.route_error);
  EXPECT_EQ(got.out, want.out);
  EXPECT_TRUE(none.route_error);
  for (float v : none.out) EXPECT_EQ(v, 0.0f);
}

TEST(NativeBackend, ForwardIsCapturableInACudaGraph) {
  REQUIRE_GPU();
  const auto g = *find_preset("qwen3-30b-a3b");
  const Target t{1, 2, 2, 1, false};
  Rng rng(7);
  const auto own = ExpertOwnership::of(g, t);
  const auto w = random_mlp(own.local_experts, g.hidden, g.intermediate, Dtype::bf16, rng);
  for (const auto& [rows, active, assigned] : {std::tuple{37, 40, 200}, std::tuple{1, 4, 4}}) {
    const auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
    const auto routes = make_expert_routes(rows, active, assigned, g, own, rng);
    const auto direct = run_experts_on_device("native", 0, g, t, x, routes, w);
    const auto graphed = run_experts_on_device("native", 0, g, t, x, routes, w, true);
    ASSERT_TRUE(has_nonzero(direct.out)) << rows;
    EXPECT_EQ(direct.out, graphed.out) << rows;  // the native forward is deterministic
    EXPECT_FALSE(graphed.route_error) << rows;
  }
}

// HARNESS_NATIVE_SCHEDULE=persistent runs a wgmma tile's two GEMMs as one persistent launch whose
// W2 units wait for their tile's W13 units, =pipelined each GEMM as a warp-specialised
// persistent launch (TMA weights, mbarrier stages; docs/native-backend.md), and =clustered the
// same in clusters of two CTAs that multicast the weights of neighbouring tiles of one expert
// (several tiles per expert, pairs across experts, an empty second tile). Every wgmma tile,
// forced, at one, a few and many tiles per expert, at off-balance points of several launch waves
// and on the odd shapes (partial boxes in rows, features and K): it matches the reference, it is
// bit-identical to the two launches (each output element is the same block tile's sum in the same
// order), and so is its graph replay (the queue resets itself between forwards; the pipelined
// blocks re-arm their barriers). A value that is not a schedule is refused.
TEST(NativeBackend, PersistentSchedulesMatchTheTwoLaunches) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  const auto odd = odd_tiny();
  const Target ep1{1, 1, 1, 0, false}, ep4{2, 2, 4, 3, false};
  Rng rng(11);
  // EP4 (32 local experts) keeps the weights small; M/A sets the tiles and waves all the same.
  const auto own = ExpertOwnership::of(qwen, ep4);
  const auto w = random_mlp(own.local_experts, qwen.hidden, qwen.intermediate, Dtype::bf16, rng);
  const auto odd_own = ExpertOwnership::of(odd, ep1);
  const auto odd_w =
      random_mlp(odd_own.local_experts, odd.hidden, odd.intermediate, Dtype::bf16, rng);
  for (const char* schedule : {"persistent", "pipelined", "clustered"})
    for (const auto wgmma_tile : kNativeTiles) {
      if (wgmma_tile == NativeTile::narrow) continue;
      const char* tile = to_string(wgmma_tile);
      SCOPED_TRACE(std::string(schedule) + ", " + tile);
      const ScopedEnv forced_tile("HARNESS_NATIVE_TILE", tile);
      const ScopedEnv forced_schedule("HARNESS_NATIVE_SCHEDULE", schedule);
      for (const GridPoint p : {GridPoint{1400, 100, 11200}, GridPoint{2400, 50, 19200},
                                GridPoint{3000, 8, 24000}, GridPoint{1024, 9, 8192}})
        expect_matches_reference("native", qwen, ep1, Component::experts, p, 2);
      for (GridPoint p : {GridPoint{3, 2, 6}, GridPoint{300, 8, 600}, GridPoint{1000, 8, 2000}})
        expect_matches_reference("native", odd, ep1, Component::experts, p, 2);
      // (1024, 9) and (216, 23) run several W13 and W2 waves with partial last ones; (500, 8) is
      // the odd shape.
      for (const auto& [g, t, weights, rows, active] :
           {std::tuple{qwen, ep4, &w, 1024, 9}, std::tuple{qwen, ep4, &w, 216, 23},
            std::tuple{odd, ep1, &odd_w, 500, 8}}) {
        const auto x =
            random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
        const auto routes =
            make_expert_routes(rows, active, rows * g.top_k, g, ExpertOwnership::of(g, t), rng);
        const auto scheduled = run_experts_on_device("native", 0, g, t, x, routes, *weights);
        const auto graphed = run_experts_on_device("native", 0, g, t, x, routes, *weights, true);
        forced_schedule.set("launches");
        const auto launches = run_experts_on_device("native", 0, g, t, x, routes, *weights);
        forced_schedule.set(schedule);
        ASSERT_TRUE(has_nonzero(launches.out)) << rows;
        EXPECT_EQ(scheduled.out, launches.out)
            << g.name << ", " << rows << " rows, " << active << " experts";
        EXPECT_EQ(graphed.out, launches.out)
            << g.name << ", " << rows << " rows, " << active << " experts";
        EXPECT_FALSE(scheduled.route_error || graphed.route_error) << rows;
      }
    }
  auto backend = make_cuda_backend("native", 0);
  {
    const WorkloadSpec spec{qwen, ep1, Component::experts, {1024, 9, 8192}, 2, 1};
    const auto error = refusal_with("HARNESS_NATIVE_SCHEDULE", "interleaved", *backend, spec);
    EXPECT_NE(error.find("HARNESS_NATIVE_SCHEDULE=interleaved: expected launches"),
              std::string::npos)
        << (error.empty() ? "HARNESS_NATIVE_SCHEDULE=interleaved was accepted" : error);
  }
  // Unset, the wgmma tiles run clustered where an expert takes more than one tile (N = 4096: two
  // wide tiles; N = 4355: three wide96 tiles, one pair in three across experts), else pipelined (N
  // = 1024: one medium tile), and the configuration says so; the narrow tile (N = 256) and the
  // mma.sync fallback have no schedule.
  for (const auto& [p, schedule] : {std::pair{GridPoint{4096, 128, 32768}, ", clustered in "},
                                    std::pair{GridPoint{4355, 128, 34840}, ", clustered in "},
                                    std::pair{GridPoint{1024, 128, 8192}, ", pipelined"},
                                    std::pair{GridPoint{256, 128, 2048}, ", pipelined"}}) {
    const WorkloadSpec s{qwen, ep1, Component::experts, p, 2, 1};
    const auto config = backend->make(s, backend->make_weights(s))->configuration();
    EXPECT_EQ(config.find(schedule) != std::string::npos, config.find("wgmma") != std::string::npos)
        << config;
  }
}

TEST(NativeBackend, RejectsShapesItDoesNotCover) {
  REQUIRE_GPU();
  auto g = *find_preset("tiny");
  g.hidden = 66;
  auto backend = make_cuda_backend("native", 0);
  WorkloadSpec spec{g, Target{}, Component::experts, {4, 2, 4}, 2, 1};
  EXPECT_THROW((void)backend->make(spec, backend->make_weights(spec)), std::invalid_argument);
}

// HARNESS_NATIVE_TILE forces one of the tiles; any other value is refused with the names.
TEST(NativeBackend, RefusesAForcedTileThatIsNotOne) {
  REQUIRE_GPU();
  const auto qwen = *find_preset("qwen3-30b-a3b");
  auto backend = make_cuda_backend("native", 0);
  // A feasible point (N = 64 tokens, A = 8 experts, M = N k = 512 lanes), so only the tile is
  // wrong.
  const WorkloadSpec spec{qwen, Target{1, 1, 1, 0, false}, Component::experts, {64, 8, 512}, 2, 1};
  const auto error = refusal_with("HARNESS_NATIVE_TILE", "wide64", *backend, spec);
  EXPECT_NE(error.find("HARNESS_NATIVE_TILE=wide64: expected one of narrow, medium, wide80, "
                       "wide96, wide112, wide, wide160, split160"),
            std::string::npos)
      << (error.empty() ? "HARNESS_NATIVE_TILE=wide64 was accepted" : error);
}

// The GPU reference that verifies every point is itself checked against the CPU reference (the
// oracle) on fresh random inputs: every component, odd shapes, invalid lanes.
std::vector<float> rounded(std::vector<float> v) {
  for (auto& f : v) f = round_to_bf16(f);
  return v;
}

TEST(GpuReference, ExpertsMatchTheCpuReferenceWithInvalidLanes) {
  REQUIRE_GPU();
  auto odd = odd_tiny();
  odd.experts = 12, odd.top_k = 3;
  const auto qwen = *find_preset("qwen3-30b-a3b");
  struct Case {
    ModelGeometry g;
    Target t;
    int rows;
  };
  // The reference multiplies tiles of 32 lanes of one expert by 64 weight rows over K chunks of
  // 32: the odd shapes leave every tile partial (H = 72 and I = 40 features and K), and 200 rows
  // with every row's first lane on expert 0 give one expert 200+ lanes (seven lane tiles).
  for (const auto& [g, t, rows] :
       {Case{odd, {1, 1, 1, 0, false}, 9}, Case{odd, {1, 2, 2, 1, false}, 33},
        Case{odd, {1, 1, 1, 0, false}, 200}, Case{qwen, {1, 2, 2, 1, false}, 5},
        Case{qwen, {1, 1, 1, 0, false}, 40}, Case{*find_preset("tiny"), {1, 1, 1, 0, false}, 64}}) {
    Rng rng(static_cast<std::uint64_t>(rows) * 31 + g.hidden);
    const auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
    const auto own = ExpertOwnership::of(g, t);
    const auto w = random_mlp(own.local_experts, g.hidden, g.intermediate, Dtype::bf16, rng);
    Routes routes{rows, g.top_k, {}, {}};
    std::uniform_int_distribution<int> pick(0, g.experts - 1);
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    for (int i = 0; i < rows * g.top_k; ++i) {
      routes.ids.push_back(rows >= 100 && i % g.top_k == 0 ? 0 : pick(rng));
      routes.weights.push_back(weight(rng));
    }
    // Invalid lanes of every kind: the reference must skip them like padding.
    routes.weights[1] = NAN;
    routes.ids[2] = g.experts;
    routes.weights[3] = -0.5f;
    routes.ids[4] = -1;
    routes.ids[5] = -7;
    routes.weights[6] = INFINITY;
    Routes want_routes = routes;
    sanitize_routes(want_routes, g.experts);
    std::vector<float> want(x.size());
    experts_ref(x, want_routes, w.view(), own.first_expert, want, Intermediates::bf16);
    const auto got = gpu_reference_experts(0, g, t, x, routes, w);
    const std::string what = g.name + " H=" + std::to_string(g.hidden) +
                             " rows=" + std::to_string(rows) + " EP" + std::to_string(t.ep);
    ASSERT_TRUE(has_nonzero(want)) << what;
    EXPECT_LE(relative_error(got, want), 5e-3) << what;
  }
}

TEST(GpuReference, WrapperMatchesTheCpuReference) {
  REQUIRE_GPU();
  auto odd = *find_preset("tiny");
  odd.hidden = 72, odd.shared = {2, 40};
  for (const auto& g : {odd, *find_preset("deepseek-v3")}) {
    const int rows = 7;
    Rng rng(77);
    const auto x = random_values(static_cast<std::size_t>(rows) * g.hidden, 1.0f, Dtype::bf16, rng);
    const auto routed = rounded(random_values(x.size(), 1.0f, Dtype::bf16, rng));
    const auto shared =
        random_mlp(g.shared.count, g.hidden, g.shared.intermediate, Dtype::bf16, rng);
    std::vector<float> want(x.size());
    wrapper_ref(x, rows, routed, shared.view(), want, Intermediates::bf16);
    EXPECT_LE(relative_error(gpu_reference_wrapper(0, g, x, routed, shared), want), 5e-3) << g.name;
  }
}

TEST(GpuReference, GateMatchesTheCpuReferenceOnEveryDecidedRow) {
  REQUIRE_GPU();
  for (const auto& [g, rows] : gate_cases()) {
    const auto [x, router, want] = gate_inputs(g, rows, 2000);
    const auto got = gpu_reference_gate(0, g, x, router);
    const std::string what =
        g.name + " E=" + std::to_string(g.experts) + " N=" + std::to_string(rows);
    int ties = 0, unlike = 0;
    for (int r = 0; r < rows; ++r) {
      if (got.ambiguous[static_cast<std::size_t>(r)]) {
        ++ties;
        continue;
      }
      std::vector<float> dense(static_cast<std::size_t>(g.experts), 0.0f);
      for (int j = 0; j < g.top_k; ++j) {
        const auto i = static_cast<std::size_t>(r) * g.top_k + j;
        dense[static_cast<std::size_t>(want.ids[i])] += want.weights[i];
      }
      const std::vector<float> row(
          got.dense.begin() + static_cast<std::ptrdiff_t>(r) * g.experts,
          got.dense.begin() + static_cast<std::ptrdiff_t>(r + 1) * g.experts);
      unlike += relative_error(row, dense) > 1e-4 ? 1 : 0;
    }
    EXPECT_EQ(unlike, 0) << what;
    EXPECT_LE(ties, 1 + rows / 100) << what;
  }
}

TEST(GpuReference, DeviceComparisonMeasuresTheLargestDifferenceAndCatchesNan) {
  REQUIRE_GPU();
  std::vector<float> want{1.0f, -2.0f, 4.0f, 0.5f};
  EXPECT_EQ(gpu_relative_error(0, want, want), 0.0);
  auto got = want;
  got[1] = -2.5f;  // |diff| 0.5 over max |want| 4
  EXPECT_DOUBLE_EQ(gpu_relative_error(0, got, want), 0.125);
  got[3] = NAN;
  EXPECT_TRUE(std::isinf(gpu_relative_error(0, got, want)));
}

}  // namespace
}  // namespace moe
