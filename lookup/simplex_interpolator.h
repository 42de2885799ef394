// Piecewise-affine interpolation over scattered measured points (docs/bundle-format.md): the
// points' affine hull is found (dependent dimensions removed), triangulated once with Qhull
// (Delaunay), and a query inside the hull is the barycentric combination of at most dim+1 <= 4
// vertices with nonnegative weights. Queries outside the hull, or off the affine hull, are refused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe {

// The triangulation of a table's points as a bundle stores it (docs/bundle-format.md#
// interpolation): the frame that normalises and projects a point onto the points' affine hull
// (y = basis . (p / scale - origin)) and the simplices as indices into the points.
struct Triangulation {
  int dimension = 0;
  std::array<double, 3> scale{1, 1, 1}, origin{};
  std::vector<std::array<double, 3>> basis;           // `dimension` orthonormal rows
  std::vector<std::array<std::size_t, 4>> simplices;  // dimension + 1 vertices used
};

class SimplexInterpolator {
 public:
  using Point = std::array<double, 3>;
  struct Weight {
    std::size_t vertex;  // index into the points given at construction
    double weight;
  };

  // Triangulates the points (Delaunay, Qhull). Throws std::invalid_argument when there are none.
  explicit SimplexInterpolator(std::vector<Point> points);
  // Uses a stored triangulation of the points. Throws std::invalid_argument naming what is
  // inconsistent (a vertex index out of range, a flat simplex, a frame of the wrong size).
  SimplexInterpolator(std::vector<Point> points, const Triangulation& t);
  // Interpolates over `points` (their frame, affine weights) with the simplices of the Delaunay
  // triangulation of `mesh_coordinates`, one per point: coordinates in which the measured
  // function's edges run along the axes (docs/bundle-format.md#interpolation), where those
  // simplices triangulate the points' hull; else with the points' own Delaunay triangulation,
  // and mesh_refusal() says why (a simplex flat or inverted in the points' frame, their volumes
  // not filling the hull, another dimension). Throws std::invalid_argument when the counts differ.
  SimplexInterpolator(std::vector<Point> points, const std::vector<Point>& mesh_coordinates);

  [[nodiscard]] Triangulation triangulation() const;
  [[nodiscard]] int dimension() const { return dim_; }
  [[nodiscard]] std::size_t simplex_count() const { return simplices_.size(); }
  // Why the mesh coordinates' simplices were not used; nullopt when they were, or none was given.
  [[nodiscard]] const std::optional<std::string>& mesh_refusal() const { return mesh_refusal_; }
  // Barycentric weights of `q` (sum 1, all >= 0), or nullopt when `q` is outside the support.
  [[nodiscard]] std::optional<std::vector<Weight>> locate(const Point& q) const;

 private:
  struct Simplex {
    std::array<std::size_t, 4> v{};
    std::array<double, 9> inverse{};  // dim x dim inverse of [v1-v0, ..., vd-v0]
  };
  [[nodiscard]] std::array<double, 3> project(
      const Point& p) const;  // normalized, in the hull basis
  // [v1 - v0, ..., vd - v0] in the projected frame, row-major d x d.
  void edge_matrix(const Simplex& s, double (&m)[9]) const;
  // The simplex's inverse edge matrix (false when it is flat).
  [[nodiscard]] bool prepare(Simplex& s) const;
  // Determinant of the edge matrix: d! times the simplex's signed volume.
  [[nodiscard]] double edge_determinant(const Simplex& s) const;
  // Sum of |edge_determinant| over `simplices`.
  [[nodiscard]] double total_determinant(const std::vector<Simplex>& simplices) const;
  // Replaces the simplices by `mesh`'s (same vertex indices) where they triangulate this hull;
  // else changes nothing and says why.
  [[nodiscard]] std::optional<std::string> adopt_simplices_of(const SimplexInterpolator& mesh);

  std::vector<Point> points_;
  Point scale_{1, 1, 1};
  Point origin_{};
  std::vector<Point> basis_;  // orthonormal basis of the affine hull (normalized coordinates)
  int dim_ = 0;
  std::vector<std::array<double, 3>> projected_;
  std::vector<Simplex> simplices_;
  std::optional<std::string> mesh_refusal_;
  // Uniform bucket grid over the projected points: each cell lists the simplices whose bounding
  // box overlaps it, so a query tests only the simplices of its own cell.
  void build_buckets();
  [[nodiscard]] std::size_t bucket_of(const std::array<double, 3>& y) const;
  std::array<double, 3> lo_{}, step_{};
  std::array<int, 3> cells_{1, 1, 1};
  std::vector<std::vector<std::uint32_t>> buckets_;
};

}  // namespace moe
