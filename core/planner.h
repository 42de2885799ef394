// The grid planner: turns a job into per-target, per-component grids (docs/measurement.md), derived
// from the geometry and configuration only, never from measurements. Pure and deterministic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/component.h"
#include "core/geometry.h"
#include "core/job_spec.h"

namespace moe {

// 3: rows around declared time steps, balanced A; 4: rows-per-expert A axis where M = N·k;
// 5: held-out probes in the halves of wide token intervals, stratified random held-out draws,
// fresh random held-out points in every refinement stage that adds grid points; 6: rows around
// the gate's declared time steps; 7: the gate's steps at every multiple of 64 from 256 to 2048 rows
inline constexpr int kPlannerVersion = 7;

struct ComponentGrid {
  Component component;
  std::vector<GridPoint> points;
  // Measured under the same protocol but never interpolated from: the validation set
  // (held_out_points).
  std::vector<GridPoint> held_out;
};

// Geometric sequence lo, lo*f, lo*f^2, ... (rounded, deduplicated) with both endpoints.
[[nodiscard]] std::vector<std::int64_t> geometric_axis(std::int64_t lo, std::int64_t hi,
                                                       double factor);

// An inclusive integer range.
struct MRange {
  std::int64_t lo, hi;
};
// Feasible M range at (N, A) for L local of E global experts with top-k; nullopt if infeasible.
[[nodiscard]] std::optional<MRange> feasible_assignments(std::int64_t n, std::int64_t a, int l,
                                                         int e, int k);
// Feasible positive A at N: [max(1, k-(E-L)), min(L, N·k)]; nullopt when empty.
[[nodiscard]] std::optional<MRange> feasible_activated(std::int64_t n, int l, int e, int k);
// The balanced total of local assignments at N: round(N·k·L/E) (may lie outside a column's range).
[[nodiscard]] std::int64_t balanced_assignments(std::int64_t n, int l, int e, int k);

// The first constraint of the feasibility polytope that (N, A, M) violates, as text naming it
// (e.g. "M <= N*min(k, A) = 72"), or nullopt when the point is feasible. A = M = 0 is the
// all-remote point, feasible when E - L >= k.
[[nodiscard]] std::optional<std::string> feasibility_violation(std::int64_t n, std::int64_t a,
                                                               std::int64_t m, int l, int e, int k);

// Token axes after the capture-size rule (docs/measurement.md).
[[nodiscard]] std::vector<std::int64_t> local_token_axis(const JobSpec& job, const Target& t);
[[nodiscard]] std::vector<std::int64_t> expert_token_axis(const JobSpec& job, const Target& t);

// Token rows around the steps a backend declares in its experts time (rows per active expert b,
// docs/measurement.md#grid), on the balanced-routing line: the last N whose mean rows per active
// expert is at most b, the next N (some experts exceed b) and the first N where the mean reaches
// b + 1 (between the last two the forward mixes experts of both sides). Within the expert token
// axis' range and domain; ascending.
[[nodiscard]] std::vector<std::int64_t> step_token_rows(
    const JobSpec& job, const Target& t, const std::vector<std::int64_t>& time_steps);
// The rows of a local component's grid: the target's local token axis (local_token_axis), and
// for gate_routing the rows b and b + 1 of each step b of `gate_time_steps` within the axis'
// range. Ascending.
[[nodiscard]] std::vector<std::int64_t> local_grid_rows(
    const std::vector<std::int64_t>& local_tokens, Component c,
    const std::vector<std::int64_t>& gate_time_steps);
// Positive-work expert points (+ the all-remote A=M=0 point per N when E-L >= k): the rows of
// expert_row over the expert token axis and the step rows of `time_steps`.
[[nodiscard]] std::vector<GridPoint> expert_grid(const JobSpec& job, const Target& t,
                                                 const std::vector<std::int64_t>& time_steps = {});
// The mean rows per active local expert of a positive-work point, M / A.
[[nodiscard]] double rows_per_active_expert(const GridPoint& p);
// Every route of `t` is to a local expert (L = E: EP1), so M = N·k in every experts column and
// the experts time is a staircase in rows per active expert M/A, smooth along each ray M/A = r.
[[nodiscard]] bool all_routes_local(const JobSpec& job, const Target& t);
// The grid points of one N row: its A axis, each with its M column (expert_column). Where every
// route is local (M = N·k) the A axis is rows-per-expert rays and brackets `time_steps`; else it
// is geometric in A.
[[nodiscard]] std::vector<GridPoint> expert_row(const JobSpec& job, const Target& t, std::int64_t n,
                                                const std::vector<std::int64_t>& time_steps = {});
// The M column at (N, A): both feasible bounds, geometric points between, the balanced total.
[[nodiscard]] std::vector<GridPoint> expert_column(const JobSpec& job, const Target& t,
                                                   std::int64_t n, std::int64_t a);
// (N, A) with M at the balanced total clamped into the feasible range; nullopt when (N, A) is
// infeasible.
[[nodiscard]] std::optional<GridPoint> balanced_column_point(const JobSpec& job, const Target& t,
                                                             std::int64_t n, std::int64_t a);
// Balanced routing at N for this target: A = the expected distinct local experts, rounded and
// clamped to feasible_activated, at balanced_column_point; nullopt when no positive-work point
// exists.
[[nodiscard]] std::optional<GridPoint> balanced_point(const JobSpec& job, const Target& t,
                                                      std::int64_t n);
[[nodiscard]] std::optional<GridPoint> balanced_point(const ModelGeometry& g, const Target& t,
                                                      std::int64_t n);

// Components measured for a target: DP1 path or DP+EP path, plus `wrapper` with shared experts.
[[nodiscard]] std::vector<Component> component_set(const ModelGeometry& g, const Target& t);

// Weight banks for `experts`: enough banks that a full rotation is at least twice the L2
// (so no bank stays resident), at least 2, at most kMaxWeightBanks.
inline constexpr int kMaxWeightBanks = 16;
[[nodiscard]] int weight_bank_count(std::int64_t local_expert_weight_bytes, std::int64_t l2_bytes);
// Forwards per arm: at least `iterations`, rounded up to complete cycles of the 2B arm.
[[nodiscard]] int forwards_per_arm(int iterations, int banks);

struct TargetPlan {
  Target target;
  ExpertOwnership ownership;
  int weight_banks = 2;
  std::vector<std::int64_t> local_tokens;  // the local token axis (local components, collectives)
  std::vector<ComponentGrid> components;
};

struct DeviceModel {
  std::string name;
  double bytes_per_s;
  double flops_per_s;
  double launch_overhead_s;
  std::int64_t l2_bytes;
  int sm_count;  // the GPU's SMs (0 for the host), which set the CUDA gate's steps
  // Host time per point and round outside timed forwards (allocation, stimuli, verification
  // against the CPU reference); calibrated on an H200 run of Qwen3-30B-A3B (docs/measurement.md).
  double local_point_overhead_s;
  double expert_point_overhead_s;
};
[[nodiscard]] DeviceModel nominal_device(std::string_view backend);

struct PlanEstimate {
  std::int64_t points = 0;  // grid and held-out points (refinement stages come on top)
  std::int64_t forwards = 0;
  double device_seconds = 0;  // timed forwards only
  double held_seconds = 0;    // wall time the device is held: forwards + per-point overheads,
                              // or the measured cost per point-round when the plan has one
  // Nominal model only: the most the capped settle could add (every point-round's settle held
  // down by the power cap and run on to capped_settle_ms); a measured cost already contains it.
  double capped_settle_seconds = 0;
};

// Measured host-plus-device seconds per point-round (setup, verification and timed forwards of
// one point in one round), by kind of component, and where they were measured. When a plan has
// one, it predicts held time from it instead of the nominal device model.
struct MeasuredCost {
  double expert_point_round_s = 0;
  double local_point_round_s = 0;
  std::string source;  // e.g. "campaign.json of out/acquisitions/x: 960 point-rounds"
};

struct Plan {
  JobSpec job;
  DeviceModel device;
  std::optional<MeasuredCost> measured;
  // Rows per active expert where the backend's experts time steps (kernels' expert_time_steps);
  // the grid has rows around each.
  std::vector<std::int64_t> expert_time_steps;
  // Rows where the backend's gate_routing time steps (kernels' gate_time_steps); the gate's grid
  // has rows b and b + 1 around each.
  std::vector<std::int64_t> gate_time_steps;
  std::vector<TargetPlan> targets;
  [[nodiscard]] PlanEstimate estimate() const;
  [[nodiscard]] PlanEstimate estimate(const TargetPlan& t, Component c) const;
};

// Device memory one rank needs for a target (docs/cli.md#plan): the weights it allocates at
// once — the experts cell's 2B banks of its local experts, the shared experts, the router — plus
// the buffers of its largest point (activations, routes, outputs and the verification
// reference's fp32 copies), an estimate of what `acquire` holds at its peak.
struct MemoryEstimate {
  std::int64_t weight_bytes = 0;
  std::int64_t buffer_bytes = 0;
  [[nodiscard]] std::int64_t total() const { return weight_bytes + buffer_bytes; }
};
[[nodiscard]] MemoryEstimate estimate_memory(const JobSpec& job, const TargetPlan& t);

// "measured (...)" or "nominal (...)": the model `estimate` uses, for the user.
[[nodiscard]] std::string cost_model_description(const Plan& plan);

[[nodiscard]] Plan make_plan(const JobSpec& job,
                             std::optional<std::int64_t> l2_bytes = std::nullopt,
                             std::vector<std::int64_t> expert_time_steps = {},
                             std::vector<std::int64_t> gate_time_steps = {});

// Nominal per-forward cost: the roofline floor (core/roofline.h) plus launch overheads.
[[nodiscard]] double estimate_forward_seconds(const ModelGeometry& g, Component c,
                                              const GridPoint& p, const DeviceModel& d);

// Nominal held seconds of one point in one round on `backend`: its timed forwards (both arms for
// `experts`), the per-point overhead and the settle, not the capped settle's run on.
[[nodiscard]] double nominal_point_round_seconds(const JobSpec& job, std::string_view backend,
                                                 const DeviceModel& d, int weight_banks,
                                                 Component c, const GridPoint& p);
// The same summed over `points`: one round of a cell, the shape of its cost that acquire scales
// by the measured/nominal ratio of its component (and `plan --campaign` predicts with).
[[nodiscard]] double nominal_round_seconds(const JobSpec& job, std::string_view backend,
                                           int weight_banks, Component c,
                                           const std::vector<GridPoint>& points);

}  // namespace moe
