// Fidelity of the tables an acquisition file holds (docs/measurement.md#fidelity): the cells of
// one target's component (the planned grid, its held-out set, and the grid rows and held-out
// points each refinement stage added) are merged into the table that would be published, and
// every held-out point is predicted from that table with the lookup's interpolation and compared
// with its measurement. The acquisition refines from this evaluation; the publisher gates on it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bundle/summary.h"
#include "core/component.h"
#include "core/job_spec.h"
#include "core/refinement.h"
#include "core/target.h"
#include "lookup/tables.h"
#include "store/acquisition_file.h"

namespace moe {

// Where a cell stands in the fidelity loop: refinement stage (0 = planned) and role, and which
// part of that stage's points it holds (a stage's points are split into cells of at most
// kCellPoints, so that a wave commits in bounded time: docs/design.md).
// `anchors` (1, 2, ...): the set of published rows a run on a device new to the campaign measured
// again, so that the devices' offset is measured, not inferred (docs/measurement.md#fidelity);
// such a cell is neither grid nor held-out.
struct CellRole {
  int stage = 0;
  bool held_out = false;
  int part = 0;
  int anchors = 0;
};
inline constexpr std::size_t kCellPoints = 64;
// Rows per table a run on a new device measures again (spread over the table's rows).
inline constexpr std::size_t kAnchorRows = 16;
// The HDF5 cell id of a target's component in a stage and role: the planned grid keeps
// "<cell_id>.<component>"; others append ".held_out" and/or ".stage<s>" (anchors
// ".anchors<a>"), parts after the first ".part<p>".
[[nodiscard]] std::string fidelity_cell_id(const Target& t, Component c, CellRole role);
// The cell's self-description (cell JSON) and its parse.
[[nodiscard]] nlohmann::json fidelity_cell_json(const Target& t, Component c, CellRole role,
                                                int rounds, int weight_banks);
[[nodiscard]] CellRole cell_role(const nlohmann::json& cell_json);

struct HeldOutPoint {
  GridPoint point;
  double measured_us = 0;
  std::optional<double> predicted_us;  // nullopt: outside the table's support
  std::string unpredicted_reason;
  // The most that its own run or a run of the rows its prediction weighs moved
  // (PointResult::run_spread; 0 where none is known): a miss no larger than this is within the
  // measurement's own movement, which more rows cannot predict.
  double run_spread = 0;
  // How the point was predicted, as ComponentFidelity's split statistics count it (nullopt where
  // that split does not apply or is not known): `experts` at the balanced routing of its N;
  // interpolated from its own device's rows only; across a declared launch-wave step.
  std::optional<bool> balanced, same_device, spans_wave_step;
  [[nodiscard]] double relative_error() const {
    return predicted_us ? std::abs(*predicted_us - measured_us) / measured_us : 0.0;
  }
  [[nodiscard]] bool miss(double tolerance) const {
    return predicted_us && relative_error() > tolerance;
  }
  // A miss that more rows could resolve (refinement bisects only these), and one they could not.
  [[nodiscard]] bool refinable_miss(double tolerance) const {
    return miss(tolerance) && relative_error() > run_spread;
  }
  [[nodiscard]] bool miss_within_run_movement(double tolerance) const {
    return miss(tolerance) && relative_error() <= run_spread;
  }
};

// A held-out point that refinement later took as a grid row, so measured twice, in two cells (two
// workloads): how far the grid measurement lies from the held-out one is the measurement's own
// repeatability at that point, with no interpolation in it (docs/measurement.md#fidelity).
// Measured on one device each time, the two runs may be on different GPUs of the kind (a campaign
// resumed elsewhere): then the difference holds the devices' offset, which the pairs' signed
// differences show (docs/measurement.md#fidelity).
struct RemeasuredPoint {
  GridPoint point;
  double held_out_us = 0, grid_us = 0;
  // Positions in hardware_identity's devices, each run's one device; -1: not recorded or several.
  int held_out_device = -1, grid_device = -1;
  [[nodiscard]] double signed_difference() const { return (grid_us - held_out_us) / held_out_us; }
  [[nodiscard]] double relative_difference() const { return std::abs(signed_difference()); }
};

// A published row measured again by a run on a device new to the campaign (an anchor).
struct AnchorPoint {
  GridPoint point;
  double row_us = 0, anchor_us = 0;
  // Positions in hardware_identity's devices: the device of the row's rounds compared, and the
  // anchor's (PointResult::time_us_by_device, so always known).
  int row_device = 0, anchor_device = 0;
  // The mean SM clock the row's rounds (median) and the anchor ran at; nullopt where not recorded.
  std::optional<double> row_clock_mhz = std::nullopt, anchor_clock_mhz = std::nullopt;
  [[nodiscard]] double signed_difference() const { return (anchor_us - row_us) / row_us; }
  // anchor clock / row clock - 1; nullopt where either is unknown.
  [[nodiscard]] std::optional<double> clock_offset() const;
};

// The rows anchored on a device against the rows' own device(s): per pair (row device, anchor
// device) the count and the signed median of (anchor - row) / row, over the anchors measured
// within `clock_threshold` of their row's clock (or where either clock is unknown); those further
// off (a power-capped row whose clock wandered: its time moves with the clock, not the device)
// are counted as clock_off {count, threshold} and left out. Null where there is no anchor.
[[nodiscard]] nlohmann::json device_anchors_json(const std::vector<AnchorPoint>& anchors,
                                                 double clock_threshold);
// One pair of device_anchors_json, as acquire, inspect and report print it: "rows of #0 measured
// again on #4: 16 rows, anchor - row median -2.41%".
[[nodiscard]] std::string anchor_pair_summary(const nlohmann::json& pair);
// The anchors device_anchors_json left out for their clock, as acquire and inspect print them
// ("2 anchors measured more than 2.00% off their rows' clock left out"); "" where none was.
[[nodiscard]] std::string anchor_clock_off_summary(const nlohmann::json& device_anchors);

// Anchor rows of a table: up to kAnchorRows of `rows` (sorted), evenly spaced from the first to
// the last, so that the offset is measured over the whole range.
[[nodiscard]] std::vector<GridPoint> anchor_rows(const std::vector<GridPoint>& rows);

struct HeldOutStatistics {
  int count = 0;                        // predicted points
  int unpredicted = 0;                  // outside the support
  int bank_failures = 0;                // held-out points whose B/2B control failed (left out)
  double median = 0, p95 = 0, max = 0;  // of |relative error|
  // Sets count, median, p95 and max from the predicted points' |relative error|s.
  void set_errors(const std::vector<double>& errors);
  // count and median / p95 / max as the bundle names them (meta.yaml coverage.fidelity).
  [[nodiscard]] nlohmann::json errors_json() const;
};

struct ComponentFidelity {
  Target target;
  Component component = Component::gate_routing;
  int stages = 0;                  // refinement stages held by the file (0 = planned cells only)
  bool complete = false;           // every cell of every stage has all its rounds
  std::vector<PointResult> table;  // latest measurement of each grid point, sorted
  std::vector<GridPoint> failed;   // grid points whose latest measurement failed B/2B
  std::map<GridPoint, int> measured_times;  // grid point -> how many stages measured it
  std::vector<std::size_t> cells;  // indices into StoredAcquisition::cells: grid, held-out, stages
  std::int64_t added_points = 0;   // grid points beyond the planned grid
  std::vector<HeldOutPoint> held_out;  // off the grid, latest measurement, bank control passed
  // Held-out points that became grid rows, both measurements passing the bank control; their
  // statistics are of |relative_difference|.
  std::vector<RemeasuredPoint> remeasured;
  HeldOutStatistics remeasured_statistics;
  // Published rows measured again on devices new to the campaign (anchor cells): each anchor's
  // device against each device that measured the row's rounds.
  std::vector<AnchorPoint> anchors;
  // Local components: consecutive token rows whose forwards ran different kernels (e.g. cuBLAS
  // changing its GEMM with N) with an integer between them: a step may lie between the rows
  // (reported; refinement bisects only pairs a few tokens apart: docs/measurement.md#fidelity).
  std::vector<std::pair<std::int64_t, std::int64_t>> kernel_changes;
  HeldOutStatistics statistics;
  // `experts`: the same over the held-out points at balanced routing (balanced_point: where a
  // serving step's routing sits) and over those off it, which the table serves less well where
  // the kernel steps between its `A` (docs/measurement.md#fidelity).
  std::optional<HeldOutStatistics> balanced, off_balance;
  // The same over the held-out points interpolated only from rows that the device which measured
  // the point measured too, and over those that drew on rows of another device (a campaign
  // resumed on other GPUs): devices' offsets are in the second, not in the first. Where rounds
  // recorded their run (CellRound::run); absent when no point could be told.
  std::optional<HeldOutStatistics> same_device, across_devices;
  // `experts` with declared launch waves (core's ExpertWaves): over the points whose vertices all
  // run the point's own waves, and over those interpolated across a wave step.
  std::optional<HeldOutStatistics> same_waves, across_waves;
  // Rows of the table that passed the bank control, per device that measured them (position in
  // hardware_identity's devices; -1: not recorded). A row measured on several counts for each.
  std::map<int, int> rows_per_device;
  [[nodiscard]] std::vector<HeldOutPoint> worst(std::size_t n) const;
  [[nodiscard]] nlohmann::json to_json(double tolerance) const;  // meta.yaml coverage.fidelity
  // Every held-out point, the largest |error| first (those outside the support last): its
  // measurement, prediction, whether it misses `tolerance` and whether within its runs' movement,
  // and how it was predicted (harness inspect --held-out).
  [[nodiscard]] nlohmann::json held_out_points_json(double tolerance) const;
};

// Whether a held-out point measured on `point_devices` (PointResult::devices) was interpolated
// from rows measured on that one device alone (true) or from rows of another device too (false):
// `vertex_devices` are the devices of the rows its prediction weighs. nullopt where a device is
// not recorded (rounds written before they recorded their run) or nothing is weighed.
[[nodiscard]] std::optional<bool> same_device(
    const std::vector<int>& point_devices,
    const std::vector<const std::vector<int>*>& vertex_devices);

// Evaluates every (target, component) of the file from its cell summaries (summarize(acq)).
// `local_experts` of each target comes from the contract. Incomplete cells count only their
// complete rounds (`complete` says so).
// `waves`: the launch waves the acquisition's backend declares (empty: none; no by-waves split).
[[nodiscard]] std::vector<ComponentFidelity> evaluate_fidelity(
    const StoredAcquisition& acq, const std::vector<CellSummary>& summaries,
    const ExpertWaves& waves = {});

// Whether `answer`, a table's prediction of the experts point `point` (A > 0), weighs a row whose
// declared launch waves differ from the point's own: the prediction spans a wave step
// (held_out.by_waves, and validate's split of its points).
[[nodiscard]] bool prediction_spans_wave_step(const ExpertWaves& waves, const GridPoint& point,
                                              const LookupResult& answer);

// The refinement stage that follows what the file holds for one table, as acquire declares it
// (docs/measurement.md#fidelity): core's refinement_step on the table's misses above the tolerance
// and beyond their runs' movement, and its grid points that failed B/2B with re-measures left.
// Nothing is added once kMaxRefinementStages ran or `fidelity.refine` is false.
inline constexpr int kMaxRefinementStages = 32;
struct NextStage {
  RefinementStep step;
  std::vector<GridPoint> remeasure;  // failed B/2B, measured again in the stage's fresh rounds
  std::vector<HeldOutMiss> misses;   // refined (or left where no interval can be split)
  int within_movement = 0;           // misses within their runs' movement: not refined
  bool stage_limit = false;          // kMaxRefinementStages ran
  bool cap_spent = false;            // the table added fidelity.max_added_points already
  [[nodiscard]] bool empty() const {
    return step.grid.empty() && step.held_out.empty() && remeasure.empty();
  }
};
[[nodiscard]] NextStage next_stage_of(const JobSpec& job, const ComponentFidelity& f,
                                      const std::vector<std::int64_t>& expert_time_steps,
                                      const ExpertWaves& waves);

// One line each on a component's fidelity JSON (ComponentFidelity::to_json: meta.yaml
// coverage.fidelity.components.<c>), as `inspect` and `report` print them: the held-out errors
// ("138 points, |error| median 0.24%, p95 0.89%, max 1.72%"), and the repeatability ("12 held-out
// points measured again as grid rows, |grid - held-out| median 0.30%, max 1.10% (no
// interpolation)"; "" where there is none: an older bundle, or no held-out point became a row).
[[nodiscard]] std::string held_out_summary(const nlohmann::json& component_fidelity);
[[nodiscard]] std::string repeatability_summary(const nlohmann::json& component_fidelity);
// And how far apart devices measured the same points, as `report` prints it: the points measured
// on two devices (repeatability.by_device), each pair of the anchors' devices and the anchors
// left out for their clock ("120 points measured on two devices, |difference| median 2.06%, max
// 4.10%; anchors: rows of #0 measured again on #4: 16 rows, anchor - row median -2.41%"); ""
// where the entry records neither.
[[nodiscard]] std::string device_spread_summary(const nlohmann::json& component_fidelity);

}  // namespace moe
