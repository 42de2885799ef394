// The Python module harness_lookup (docs/install.md#python): a bundle's tables for one
// deployment, queried one point at a time or in NumPy batches. Errors raise LookupError (a
// subclass of ValueError) with the library's message.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "lookup/lookup.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

moe::Component component_of(const std::string& name) {
  const auto c = moe::parse_component(name);
  if (!c)
    throw moe::LookupError("unknown component '" + name + "' (" + moe::component_names() + ")");
  return *c;
}

// A table's held-out errors with the bundle's key names.
nb::dict dict_of(const moe::HeldOutErrors& e) {
  nb::dict out;
  out["count"] = e.count;
  out["median_abs_relative_error"] = e.median;
  out["p95_abs_relative_error"] = e.p95;
  out["max_abs_relative_error"] = e.max;
  if (!e.routing.empty()) out["routing"] = e.routing;
  if (!e.waves.empty()) out["waves"] = e.waves;
  return out;
}

// One deployment of a bundle: its component tables and, when the bundle has one, its
// collective table.
class Bundle {
 public:
  Bundle(const std::string& variant_dir, int tp, int dp, int rank, std::optional<bool> sp,
         const std::string& expect_device)
      : key_{tp, dp, rank, sp, expect_device},
        tables_(moe::Deployment::load(variant_dir, key_)),
        variant_dir_(variant_dir) {}

  double query(const std::string& component, std::int64_t tokens, std::int64_t activated,
               std::int64_t assignments) {
    return tables_.query(component_of(component), tokens, activated, assignments).time_us;
  }

  // NaN where a query is refused, so that one bad point does not lose the batch.
  nb::ndarray<nb::numpy, double> query_batch(
      const std::string& component, nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig> n,
      std::optional<nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig>> a,
      std::optional<nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig>> m) {
    const auto c = component_of(component);
    const std::size_t count = n.shape(0);
    if ((a && a->shape(0) != count) || (m && m->shape(0) != count))
      throw moe::LookupError("tokens, activated and assignments must have the same length");
    auto* out = new double[count];
    nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<double*>(p); });
    for (std::size_t i = 0; i < count; ++i) {
      try {
        out[i] = tables_.query(c, n(i), a ? (*a)(i) : 0, m ? (*m)(i) : 0).time_us;
      } catch (const moe::LookupError&) {
        out[i] = std::numeric_limits<double>::quiet_NaN();
      }
    }
    return nb::ndarray<nb::numpy, double>(out, {count}, owner);
  }

  nb::dict explain(const std::string& component, std::int64_t tokens, std::int64_t activated,
                   std::int64_t assignments) {
    const auto c = component_of(component);
    const auto r = tables_.query(c, tokens, activated, assignments);
    nb::list vertices;
    for (const auto& v : r.vertices) {
      nb::dict d;
      d["tokens"] = v.point.tokens;
      d["activated_experts"] = v.point.activated;
      d["local_assignments"] = v.point.assignments;
      d["time_us"] = v.time_us;
      d["weight"] = v.weight;
      vertices.append(d);
    }
    nb::dict out;
    out["time_us"] = r.time_us;
    out["exact"] = r.exact;
    out["vertices"] = vertices;
    const auto spans = tables_.spans_launch_wave_step(c, r);
    out["spans_launch_wave_step"] = spans ? nb::cast(*spans) : nb::none();
    return out;
  }

  // None where the bundle records no held-out errors.
  std::optional<nb::dict> held_out(const std::string& component, std::int64_t tokens,
                                   std::int64_t activated, std::int64_t assignments) const {
    const auto e = tables_.held_out_errors(component_of(component), tokens, activated, assignments);
    if (!e) return std::nullopt;
    return dict_of(*e);
  }

  // None where the bundle records no split by launch waves.
  std::optional<nb::dict> held_out_across_wave_steps(const std::string& component) const {
    const auto e = tables_.held_out_errors_across_wave_steps(component_of(component));
    if (!e) return std::nullopt;
    return dict_of(*e);
  }

  // None where the bundle records no spread between devices.
  std::optional<nb::dict> device_spread(const std::string& component) const {
    const auto s = tables_.device_spread(component_of(component));
    if (!s) return std::nullopt;
    nb::dict out;
    out["count"] = s->count;
    out["median"] = s->median;
    out["max"] = s->max;
    out["largest_offset"] = s->largest_offset;
    return out;
  }

  nb::dict collective(const std::string& name, std::int64_t tokens) {
    if (!collectives_) collectives_ = moe::CollectiveTable::load(variant_dir_, key_);
    const auto r = collectives_->query(name, tokens);
    nb::dict out;
    out["time_us"] = r.time_us;
    out["steady_time_us"] = r.steady_time_us;
    out["bytes"] = r.bytes;
    out["exact"] = r.exact;
    return out;
  }

  std::vector<std::string> components() const {
    std::vector<std::string> out;
    for (const auto c : tables_.components()) out.emplace_back(moe::to_string(c));
    return out;
  }
  std::string contract() const { return tables_.contract().dump(); }

 private:
  moe::DeploymentKey key_;
  moe::Deployment tables_;
  std::string variant_dir_;
  std::optional<moe::CollectiveTable> collectives_;
};

}  // namespace

NB_MODULE(harness_lookup, mod) {
  mod.doc() = "Measured MoE layer times from harness bundles (docs/bundle-format.md).";
  nb::exception<moe::LookupError>(mod, "LookupError", PyExc_ValueError);
  nb::class_<Bundle>(mod, "Bundle",
                     "The tables of one deployment (TP, DP, rank) of a bundle variant directory.")
      .def(nb::init<const std::string&, int, int, int, std::optional<bool>, const std::string&>(),
           "variant_dir"_a, "tp"_a, "dp"_a, "rank"_a = 0, "sp"_a = nb::none(),
           "expect_device"_a = "")
      .def("query", &Bundle::query, "component"_a, "tokens"_a, "activated"_a = 0,
           "assignments"_a = 0,
           "Component time in microseconds; raises LookupError outside the support.")
      .def("query_batch", &Bundle::query_batch, "component"_a, "tokens"_a,
           "activated"_a = nb::none(), "assignments"_a = nb::none(),
           "Times for int64 arrays of points; NaN where a point is refused.")
      .def("explain", &Bundle::explain, "component"_a, "tokens"_a, "activated"_a = 0,
           "assignments"_a = 0,
           "The time, the measured rows and weights it comes from, and whether those rows run "
           "different launch waves (spans_launch_wave_step: True, False, or None where unknown).")
      .def("held_out", &Bundle::held_out, "component"_a, "tokens"_a, "activated"_a = 0,
           "assignments"_a = 0,
           "The table's held-out |relative error| (count, median, p95, max) that applies to the "
           "point: for experts that of its routing class (routing: balanced | off_balance) where "
           "the bundle records both; None where it records none.")
      .def("held_out_across_wave_steps", &Bundle::held_out_across_wave_steps, "component"_a,
           "The table's held-out |relative error| over its points whose prediction spanned a "
           "launch-wave step (what applies where explain says spans_launch_wave_step); None "
           "where the bundle records no such split.")
      .def("device_spread", &Bundle::device_spread, "component"_a,
           "How far apart GPUs of the kind measured the same points of the table (count, "
           "median, max of |difference|; largest_offset: the signed median of the device pair "
           "furthest apart, of at least 5 points); None where the bundle records none.")
      .def("collective", &Bundle::collective, "name"_a, "tokens"_a,
           "A collective's kernel and steady-state time and bytes at per-DP-rank tokens.")
      .def_prop_ro("components", &Bundle::components)
      .def_prop_ro("contract_json", &Bundle::contract);
}
