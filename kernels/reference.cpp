#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/bf16.h"

namespace moe {

namespace {
float silu(float v) {
  return v / (1.0f + std::exp(-v));
}

// Dot product with eight independent fp32 accumulators (vectorizable; fp32 accumulation).
// Left out of the sanitizers: it is most of the CPU backend's time, and instrumented it made the
// sanitized test suite (fuzz/README.md) several times slower; its callers' indexing and buffers
// stay instrumented, and its results are checked by the reference tests.
__attribute__((no_sanitize("address", "undefined"))) float dot(const float* a, const float* b,
                                                               int n) {
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float keep(float v, bool bf16) {
  return bf16 ? round_to_bf16(v) : v;
}

// acc[h] += scale * W2_e (silu(G_e x) * (U_e x)) for one row. With `bf16`, the values a GPU
// stores between steps (gate/up projections, activation, expert output) are rounded to bf16.
void mlp_row(const float* x, const MlpView& w, int e, float scale, std::vector<float>& act,
             float* acc, bool bf16, bool round_output = true) {
  const int h = w.hidden, i_dim = w.intermediate;
  const float* w13 = w.experts[static_cast<std::size_t>(e)].w13;
  const float* w2 = w.experts[static_cast<std::size_t>(e)].w2;
  for (int i = 0; i < i_dim; ++i)
    act[i] = keep(silu(keep(dot(w13 + static_cast<std::size_t>(i) * h, x, h), bf16)) *
                      keep(dot(w13 + static_cast<std::size_t>(i + i_dim) * h, x, h), bf16),
                  bf16);
  for (int c = 0; c < h; ++c)
    acc[c] += scale * keep(dot(w2 + static_cast<std::size_t>(c) * i_dim, act.data(), i_dim),
                           bf16 && round_output);
}
}  // namespace

int sanitize_routes(Routes& r, int experts) {
  int bad = 0;
  for (std::size_t i = 0; i < r.ids.size(); ++i) {
    const auto id = r.ids[i];
    const float w = r.weights[i];
    const bool id_ok = id == -1 || (id >= 0 && id < experts);
    const bool w_ok = std::isfinite(w) && w >= 0.0f;
    if (id == -1 && w_ok) continue;
    if (!id_ok || !w_ok) {
      r.ids[i] = -1;
      r.weights[i] = 0.0f;
      ++bad;
    }
  }
  return bad;
}

void gate_routing_ref(std::span<const float> x, int rows, std::span<const float> router_weight,
                      const ModelGeometry& g, Routes& out) {
  const int h = g.hidden, e = g.experts, k = g.top_k;
  out.rows = rows;
  out.k = k;
  out.ids.assign(static_cast<std::size_t>(rows) * k, -1);
  out.weights.assign(static_cast<std::size_t>(rows) * k, 0.0f);
  std::vector<float> p(e);
  std::vector<int> order(e);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<std::size_t>(r) * h;
    float mx = -INFINITY;
    for (int j = 0; j < e; ++j) {
      const float s = dot(xr, router_weight.data() + static_cast<std::size_t>(j) * h, h);
      p[j] = s;
      mx = std::max(mx, s);
    }
    float sum = 0;
    for (int j = 0; j < e; ++j) sum += (p[j] = std::exp(p[j] - mx));
    for (int j = 0; j < e; ++j) p[j] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float top = 0;
    for (int j = 0; j < k; ++j) top += p[order[j]];
    for (int j = 0; j < k; ++j) {
      out.ids[static_cast<std::size_t>(r) * k + j] = order[j];
      out.weights[static_cast<std::size_t>(r) * k + j] =
          g.renormalize ? p[order[j]] / top : p[order[j]];
    }
  }
  sanitize_routes(out, e);
}

MlpView MlpWeights::view() const {
  MlpView v{hidden, intermediate, {}};
  const std::size_t s13 = static_cast<std::size_t>(2) * intermediate * hidden;
  const std::size_t s2 = static_cast<std::size_t>(hidden) * intermediate;
  for (int e = 0; e < experts; ++e) v.experts.push_back({w13.data() + e * s13, w2.data() + e * s2});
  return v;
}

void experts_ref(std::span<const float> x, const Routes& routes, const MlpView& w, int first_expert,
                 std::span<float> out, Intermediates inter) {
  const int h = w.hidden;
  std::fill(out.begin(), out.end(), 0.0f);
  std::vector<float> act(w.intermediate);
  for (int r = 0; r < routes.rows; ++r)
    for (int j = 0; j < routes.k; ++j) {
      const auto idx = static_cast<std::size_t>(r) * routes.k + j;
      const int local = routes.ids[idx] - first_expert;
      if (routes.ids[idx] < 0 || local < 0 || local >= static_cast<int>(w.experts.size())) continue;
      mlp_row(x.data() + static_cast<std::size_t>(r) * h, w, local, routes.weights[idx], act,
              out.data() + static_cast<std::size_t>(r) * h, inter == Intermediates::bf16);
    }
}

void finalize_copy_ref(std::span<const float> in, std::span<float> out) {
  std::copy(in.begin(), in.end(), out.begin());
}

void wrapper_ref(std::span<const float> x, int rows, std::span<const float> routed,
                 const MlpView& shared, std::span<float> out, Intermediates inter) {
  const int h = shared.hidden;
  std::copy(routed.begin(), routed.end(), out.begin());
  std::vector<float> act(shared.intermediate);
  for (int r = 0; r < rows; ++r)
    for (int e = 0; e < static_cast<int>(shared.experts.size()); ++e)
      // The shared output accumulates onto the routed rows in fp32 (GEMM with beta = 1).
      mlp_row(x.data() + static_cast<std::size_t>(r) * h, shared, e, 1.0f, act,
              out.data() + static_cast<std::size_t>(r) * h, inter == Intermediates::bf16, false);
}

double relative_error(std::span<const float> got, std::span<const float> want) {
  double scale = 1e-20, err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    err = std::isnan(d) ? INFINITY : std::max(err, d);
  }
  return err / scale;
}

}  // namespace moe
