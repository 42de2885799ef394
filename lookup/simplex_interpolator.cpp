#include "lookup/simplex_interpolator.h"

extern "C" {
#include <libqhull_r/qhull_ra.h>
}

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace moe {

namespace {

constexpr double kHullTolerance = 1e-9;    // relative, normalized coordinates
constexpr double kWeightTolerance = 1e-9;  // barycentric weights down to -tol count as inside

double determinant(int d, const double* m) {
  if (d == 1) return m[0];
  if (d == 2) return m[0] * m[3] - m[1] * m[2];
  return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
         m[2] * (m[3] * m[7] - m[4] * m[6]);
}

bool invert(int d, const double* m, double* inv) {
  const double det = determinant(d, m);
  if (std::fabs(det) < 1e-14) return false;
  if (d == 1) {
    inv[0] = 1.0 / det;
    return true;
  }
  if (d == 2) {
    inv[0] = m[3] / det, inv[1] = -m[1] / det, inv[2] = -m[2] / det, inv[3] = m[0] / det;
    return true;
  }
  inv[0] = (m[4] * m[8] - m[5] * m[7]) / det;
  inv[1] = (m[2] * m[7] - m[1] * m[8]) / det;
  inv[2] = (m[1] * m[5] - m[2] * m[4]) / det;
  inv[3] = (m[5] * m[6] - m[3] * m[8]) / det;
  inv[4] = (m[0] * m[8] - m[2] * m[6]) / det;
  inv[5] = (m[2] * m[3] - m[0] * m[5]) / det;
  inv[6] = (m[3] * m[7] - m[4] * m[6]) / det;
  inv[7] = (m[1] * m[6] - m[0] * m[7]) / det;
  inv[8] = (m[0] * m[4] - m[1] * m[3]) / det;
  return true;
}

// Owner of a Qhull context; frees all its memory.
class Qhull {
 public:
  Qhull() { QHULL_LIB_CHECK qh_zero(&qh_, stderr); }
  ~Qhull() {
    int curlong = 0, totlong = 0;
    qh_freeqhull(&qh_, !qh_ALL);
    qh_memfreeshort(&qh_, &curlong, &totlong);
  }
  Qhull(const Qhull&) = delete;
  Qhull& operator=(const Qhull&) = delete;
  qhT* get() { return &qh_; }

 private:
  qhT qh_;
};

}  // namespace

SimplexInterpolator::SimplexInterpolator(std::vector<Point> points) : points_(std::move(points)) {
  if (points_.empty()) throw std::invalid_argument("no measured points to interpolate");
  // Barycentric weights are affine invariant: scaling each axis to [0,1] only conditions Qhull.
  for (int a = 0; a < 3; ++a) {
    double mx = 0;
    for (const auto& p : points_) mx = std::max(mx, std::fabs(p[a]));
    scale_[a] = mx > 0 ? mx : 1.0;
  }
  std::vector<Point> norm(points_.size());
  for (std::size_t i = 0; i < points_.size(); ++i)
    for (int a = 0; a < 3; ++a) norm[i][a] = points_[i][a] / scale_[a];
  origin_ = norm.front();
  // Orthonormal basis of the affine hull by Gram-Schmidt over differences from the origin.
  for (const auto& p : norm) {
    Point d{p[0] - origin_[0], p[1] - origin_[1], p[2] - origin_[2]};
    for (const auto& b : basis_) {
      const double dot = d[0] * b[0] + d[1] * b[1] + d[2] * b[2];
      for (int a = 0; a < 3; ++a) d[a] -= dot * b[a];
    }
    const double len = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    if (len > 1e-7) {
      basis_.push_back({d[0] / len, d[1] / len, d[2] / len});
      if (basis_.size() == 3) break;
    }
  }
  dim_ = static_cast<int>(basis_.size());
  for (const auto& p : points_) projected_.push_back(project(p));
  if (dim_ == 0) return;
  if (dim_ == 1) {
    std::vector<std::size_t> order(points_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](auto x, auto y) { return projected_[x][0] < projected_[y][0]; });
    for (std::size_t i = 0; i + 1 < order.size(); ++i) {
      Simplex s;
      s.v[0] = order[i];
      s.v[1] = order[i + 1];
      if (prepare(s)) simplices_.push_back(s);  // not at a duplicate position
    }
    build_buckets();
    return;
  }
  std::vector<coordT> coords;
  for (const auto& p : projected_)
    for (int a = 0; a < dim_; ++a) coords.push_back(p[static_cast<std::size_t>(a)]);
  Qhull hull;
  qhT* qh = hull.get();  // the name Qhull's iteration macros expect
  char options[] = "qhull d Qt Qbb Qz Q12";
  const int rc = qh_new_qhull(qh, dim_, static_cast<int>(projected_.size()), coords.data(), False,
                              options, nullptr, nullptr);
  if (rc != 0)
    throw std::runtime_error("Qhull Delaunay triangulation failed (code " + std::to_string(rc) +
                             ")");
  facetT* facet;
  FORALLfacets {
    if (facet->upperdelaunay) continue;
    Simplex s;
    int n = 0;
    vertexT *vertex, **vertexp;
    FOREACHvertex_(facet->vertices) {
      if (n < 4)
        s.v[static_cast<std::size_t>(n)] = static_cast<std::size_t>(qh_pointid(qh, vertex->point));
      ++n;
    }
    if (n != dim_ + 1) continue;
    bool valid = true;
    for (int k = 0; k <= dim_; ++k)
      valid = valid && s.v[static_cast<std::size_t>(k)] < points_.size();
    if (!valid) continue;                     // the point at infinity added by Qz
    if (prepare(s)) simplices_.push_back(s);  // flat simplices are left out
  }
  build_buckets();
}

SimplexInterpolator::SimplexInterpolator(std::vector<Point> points, const Triangulation& t)
    : points_(std::move(points)),
      scale_(t.scale),
      origin_(t.origin),
      basis_(t.basis),
      dim_(t.dimension) {
  if (points_.empty()) throw std::invalid_argument("no measured points to interpolate");
  if (dim_ < 0 || dim_ > 3 || static_cast<int>(basis_.size()) != dim_)
    throw std::invalid_argument("triangulation: dimension " + std::to_string(dim_) + " with " +
                                std::to_string(basis_.size()) + " basis vectors");
  for (int a = 0; a < 3; ++a)
    if (!(scale_[a] > 0)) throw std::invalid_argument("triangulation: scale must be positive");
  for (const auto& p : points_) projected_.push_back(project(p));
  if (dim_ == 0) return;
  for (const auto& given : t.simplices) {
    Simplex s;
    s.v = given;
    for (int k = 0; k <= dim_; ++k)
      if (s.v[static_cast<std::size_t>(k)] >= points_.size())
        throw std::invalid_argument(
            "triangulation: simplex vertex " + std::to_string(s.v[static_cast<std::size_t>(k)]) +
            " is not one of the " + std::to_string(points_.size()) + " points");
    if (!prepare(s)) throw std::invalid_argument("triangulation: a simplex is flat");
    simplices_.push_back(s);
  }
  build_buckets();
}

SimplexInterpolator::SimplexInterpolator(std::vector<Point> points,
                                         const std::vector<Point>& mesh_coordinates)
    : SimplexInterpolator(std::move(points)) {
  if (mesh_coordinates.size() != points_.size())
    throw std::invalid_argument("mesh coordinates: one per point needed");
  mesh_refusal_ = adopt_simplices_of(SimplexInterpolator(mesh_coordinates));
}

std::optional<std::string> SimplexInterpolator::adopt_simplices_of(
    const SimplexInterpolator& mesh) {
  if (mesh.dim_ != dim_)
    return "their hull has dimension " + std::to_string(mesh.dim_) + ", the points' " +
           std::to_string(dim_);
  if (dim_ == 0) return std::nullopt;
  // A vertex-wise image of a triangulation is one when every simplex keeps its orientation (no
  // fold) and together they fill the hull (no overlap, no gap).
  std::vector<Simplex> adopted;
  double orientation = 0;
  for (const auto& given : mesh.simplices_) {
    Simplex s;
    s.v = given.v;
    if (!prepare(s)) return "a simplex is flat";
    const double relative = edge_determinant(s) * mesh.edge_determinant(given);
    if (orientation == 0) orientation = relative;
    if (relative * orientation <= 0) return "a simplex is inverted";
    adopted.push_back(s);
  }
  const double hull = total_determinant(simplices_);
  if (std::fabs(total_determinant(adopted) - hull) > 1e-9 * hull)
    return "the simplices do not fill the hull";
  simplices_ = std::move(adopted);
  build_buckets();
  return std::nullopt;
}

double SimplexInterpolator::edge_determinant(const Simplex& s) const {
  double m[9];
  edge_matrix(s, m);
  return determinant(dim_, m);
}

double SimplexInterpolator::total_determinant(const std::vector<Simplex>& simplices) const {
  double sum = 0;
  for (const auto& s : simplices) sum += std::fabs(edge_determinant(s));
  return sum;
}

Triangulation SimplexInterpolator::triangulation() const {
  Triangulation t{dim_, scale_, origin_, basis_, {}};
  for (const auto& s : simplices_) t.simplices.push_back(s.v);
  return t;
}

void SimplexInterpolator::edge_matrix(const Simplex& s, double (&m)[9]) const {
  const auto& v0 = projected_[s.v[0]];
  for (int r = 0; r < dim_; ++r)
    for (int c = 0; c < dim_; ++c)
      m[r * dim_ + c] =
          projected_[s.v[static_cast<std::size_t>(c + 1)]][static_cast<std::size_t>(r)] -
          v0[static_cast<std::size_t>(r)];
}

bool SimplexInterpolator::prepare(Simplex& s) const {
  double m[9];
  edge_matrix(s, m);
  return invert(dim_, m, s.inverse.data());
}

void SimplexInterpolator::build_buckets() {
  const int per_axis = std::clamp(static_cast<int>(std::ceil(std::pow(
                                      static_cast<double>(simplices_.size()) / 4.0, 1.0 / dim_))),
                                  1, 64);
  for (int a = 0; a < dim_; ++a) {
    double mn = INFINITY, mx = -INFINITY;
    for (const auto& p : projected_)
      mn = std::min(mn, p[static_cast<std::size_t>(a)]),
      mx = std::max(mx, p[static_cast<std::size_t>(a)]);
    lo_[static_cast<std::size_t>(a)] = mn;
    step_[static_cast<std::size_t>(a)] = std::max((mx - mn) / per_axis, 1e-12);
    cells_[static_cast<std::size_t>(a)] = per_axis;
  }
  buckets_.assign(static_cast<std::size_t>(cells_[0]) * cells_[1] * cells_[2], {});
  const auto cell = [&](int a, double v) {
    return std::clamp(static_cast<int>(std::floor((v - lo_[static_cast<std::size_t>(a)]) /
                                                  step_[static_cast<std::size_t>(a)])),
                      0, cells_[static_cast<std::size_t>(a)] - 1);
  };
  for (std::size_t i = 0; i < simplices_.size(); ++i) {
    std::array<int, 3> c0{0, 0, 0}, c1{0, 0, 0};
    for (int a = 0; a < dim_; ++a) {
      double mn = INFINITY, mx = -INFINITY;
      for (int k = 0; k <= dim_; ++k) {
        const double v =
            projected_[simplices_[i].v[static_cast<std::size_t>(k)]][static_cast<std::size_t>(a)];
        mn = std::min(mn, v), mx = std::max(mx, v);
      }
      // Widened by the tolerance so that points on a cell boundary find their simplex.
      const double pad = 1e-9 + 1e-6 * step_[static_cast<std::size_t>(a)];
      c0[static_cast<std::size_t>(a)] = cell(a, mn - pad);
      c1[static_cast<std::size_t>(a)] = cell(a, mx + pad);
    }
    for (int x = c0[0]; x <= c1[0]; ++x)
      for (int y = c0[1]; y <= c1[1]; ++y)
        for (int z = c0[2]; z <= c1[2]; ++z)
          buckets_[(static_cast<std::size_t>(x) * cells_[1] + y) * cells_[2] + z].push_back(
              static_cast<std::uint32_t>(i));
  }
}

std::size_t SimplexInterpolator::bucket_of(const std::array<double, 3>& y) const {
  std::array<int, 3> c{0, 0, 0};
  for (int a = 0; a < dim_; ++a)
    c[static_cast<std::size_t>(a)] = std::clamp(
        static_cast<int>(
            std::floor((y[static_cast<std::size_t>(a)] - lo_[static_cast<std::size_t>(a)]) /
                       step_[static_cast<std::size_t>(a)])),
        0, cells_[static_cast<std::size_t>(a)] - 1);
  return (static_cast<std::size_t>(c[0]) * cells_[1] + c[1]) * cells_[2] + c[2];
}

std::array<double, 3> SimplexInterpolator::project(const Point& p) const {
  std::array<double, 3> y{};
  const Point d{p[0] / scale_[0] - origin_[0], p[1] / scale_[1] - origin_[1],
                p[2] / scale_[2] - origin_[2]};
  for (std::size_t b = 0; b < basis_.size(); ++b)
    y[b] = d[0] * basis_[b][0] + d[1] * basis_[b][1] + d[2] * basis_[b][2];
  return y;
}

std::optional<std::vector<SimplexInterpolator::Weight>> SimplexInterpolator::locate(
    const Point& q) const {
  const auto y = project(q);
  // Off the affine hull (a dependent dimension violated, e.g. M != N*k at EP1): refused.
  Point back{origin_};
  for (std::size_t b = 0; b < basis_.size(); ++b)
    for (int a = 0; a < 3; ++a) back[a] += y[b] * basis_[b][a];
  for (int a = 0; a < 3; ++a)
    if (std::fabs(back[a] - q[a] / scale_[a]) > kHullTolerance * 1e3) return std::nullopt;
  if (dim_ == 0) {
    if (q == points_.front()) return std::vector<Weight>{{0, 1.0}};
    return std::nullopt;
  }
  for (const auto index : buckets_[bucket_of(y)]) {
    const auto& s = simplices_[index];
    const auto& v0 = projected_[s.v[0]];
    double lambda[4];
    double rest = 1.0;
    bool inside = true;
    for (int r = 0; r < dim_ && inside; ++r) {
      double l = 0;
      for (int c = 0; c < dim_; ++c)
        l += s.inverse[static_cast<std::size_t>(r * dim_ + c)] *
             (y[static_cast<std::size_t>(c)] - v0[static_cast<std::size_t>(c)]);
      lambda[r + 1] = l;
      rest -= l;
      inside = l >= -kWeightTolerance;
    }
    if (!inside || rest < -kWeightTolerance) continue;
    lambda[0] = rest;
    std::vector<Weight> w;
    double sum = 0;
    for (int k = 0; k <= dim_; ++k) sum += std::max(0.0, lambda[k]);
    for (int k = 0; k <= dim_; ++k) {
      const double lk = std::max(0.0, lambda[k]) / sum;
      if (lk > 0) w.push_back({s.v[static_cast<std::size_t>(k)], lk});
    }
    return w;
  }
  return std::nullopt;
}

}  // namespace moe
