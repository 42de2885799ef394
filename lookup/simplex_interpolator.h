// Piecewise-affine interpolation over scattered measured points (docs/bundle-format.md): the
// points' affine hull is found (dependent dimensions removed), triangulated once with Qhull
// (Delaunay), and a query inside the hull is the barycentric combination of at most dim+1 <= 4
// vertices with nonnegative weights. Queries outside the hull, or off the affine hull, are refused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace moe {

class SimplexInterpolator {
 public:
  using Point = std::array<double, 3>;
  struct Weight {
    std::size_t vertex;  // index into the points given at construction
    double weight;
  };

  // Throws std::invalid_argument when there are no points.
  explicit SimplexInterpolator(std::vector<Point> points);

  [[nodiscard]] int dimension() const { return dim_; }
  [[nodiscard]] std::size_t simplex_count() const { return simplices_.size(); }
  // Barycentric weights of `q` (sum 1, all >= 0), or nullopt when `q` is outside the support.
  [[nodiscard]] std::optional<std::vector<Weight>> locate(const Point& q) const;

 private:
  struct Simplex {
    std::array<std::size_t, 4> v{};
    std::array<double, 9> inverse{};  // dim x dim inverse of [v1-v0, ..., vd-v0]
  };
  [[nodiscard]] std::array<double, 3> project(
      const Point& p) const;  // normalized, in the hull basis

  std::vector<Point> points_;
  Point scale_{1, 1, 1};
  Point origin_{};
  std::vector<Point> basis_;  // orthonormal basis of the affine hull (normalized coordinates)
  int dim_ = 0;
  std::vector<std::array<double, 3>> projected_;
  std::vector<Simplex> simplices_;
  // Uniform bucket grid over the projected points: each cell lists the simplices whose bounding
  // box overlaps it, so a query tests only the simplices of its own cell.
  void build_buckets();
  [[nodiscard]] std::size_t bucket_of(const std::array<double, 3>& y) const;
  std::array<double, 3> lo_{}, step_{};
  std::array<int, 3> cells_{1, 1, 1};
  std::vector<std::vector<std::uint32_t>> buckets_;
};

}  // namespace moe
