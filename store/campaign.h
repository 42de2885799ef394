// The campaign state of one acquisition directory (campaign.json, replaced atomically by rank 0):
// phase, cell rounds done, device time consumed against the job's GPU-hour budget, the exact
// command, and SHA-256 hashes of the job, the harness binary and the operator-family table.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/planner.h"
#include "store/records.h"

namespace moe {

class BudgetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr const char* kCampaignFile = "campaign.json";
// The acquisition file beside it in an acquisition directory (acquire --out).
inline constexpr const char* kAcquisitionFile = "acquisition.h5";
// Rewritten every second by rank 0 while a run is alive (ranks/watchdog.h): its modification time
// is when an interrupted run was last alive.
inline constexpr const char* kHeartbeatFile = "campaign.heartbeat";

// campaign.json with its digest checked: throws std::runtime_error naming the file when it is not
// JSON or was edited outside the harness (its `digest`, the SHA-256 of the rest, differs).
[[nodiscard]] nlohmann::json load_campaign_document(const std::filesystem::path& path);

// Charges `device_seconds` of work outside acquire (the co-location gate) to the campaign of
// `dir`, creating the state when there is none yet; recorded under `charges`.
void charge_campaign(const std::filesystem::path& dir, const std::string& what,
                     double device_seconds);

class CampaignState {
 public:
  // Loads `dir`/campaign.json or starts a new state. A state whose operator-family table SHA-256
  // (`families`) differs (a semantic condition of the gate and of the recorded shares) refuses to
  // resume, naming it; a different binary or host is recorded in the history but does not block.
  // The budget is fixed when the campaign starts: a larger one is refused (BudgetError) unless
  // `raise_budget`, and every change is recorded under `budget_changes`. A wave reserved by an
  // interrupted run is charged here: its devices x the time from its start to the run's last
  // heartbeat (kHeartbeatFile), recorded under `interrupted_waves`.
  CampaignState(const std::filesystem::path& dir, const std::string& command,
                const std::string& job_text, const std::string& families, double budget_seconds,
                bool raise_budget = false);

  // Refuses (BudgetError) to start a wave whose conservative estimate would exceed the budget;
  // otherwise records the reservation (wave, estimate, devices, start) before the wave starts.
  void reserve(const std::string& wave, double estimate_seconds, int devices);
  void set_phase(const std::string& phase);
  // The outcome of this run, in its entry of `runs`: "complete", "budget_stop", "time_limit" or
  // "failed", with the reason (a killed run leaves none: its entry has no outcome).
  void set_outcome(const std::string& outcome, const std::string& reason);
  // The latest measured / nominal cost ratio of each component of each target (keys
  // "<target label> <component>"), from a calibration or a wave, under `cost_ratios`: a resumed
  // run predicts its cells from them instead of calibrating again.
  void record_cost_ratios(const std::map<std::string, double>& ratios);
  [[nodiscard]] std::map<std::string, double> cost_ratios() const;

  // One cell round of a wave as the campaign accounts it: the cell (its id in the acquisition
  // file), the round, whether its component is `experts` (else a local one), and its measured
  // cost (setup, verification and timed forwards).
  struct WaveRound {
    std::string cell;
    int round = 0;
    bool experts = false;
    double seconds = 0;
    std::int64_t point_rounds = 0;
  };
  // A wave's accounting, in two saves around its commit to the acquisition file. `encoded`
  // before: its rows (samples, medians, checks) are counted as encoded and its rounds wait under
  // `pending_wave`. `committed` after: the rows are written, and the wave's device time (wall x
  // devices), cell rounds and measured costs (seconds and point-rounds of expert and of local
  // components, which `harness plan --campaign` predicts from) are accounted and its reservation
  // released, in one save: a kill leaves the wave either pending or wholly accounted.
  void encoded(const RecordCounts& rows, const std::vector<WaveRound>& rounds);
  void committed(double wall_seconds, int devices);
  // Charges devices held outside a wave (calibration, a refinement evaluation, the collectives).
  void charge(double wall_seconds, int devices);
  // At start, against the rows in complete rounds of the file: a commit that finished before a
  // crash is counted, rows lost in flight are recorded, and anything else (rows the counters
  // cannot explain) is rejected. The rounds of a wave left pending are accounted where the file
  // holds them complete (`round_complete(cell, round)`; their device time was charged from the
  // heartbeat) and dropped where not (they are measured again); `recovered_waves` records it.
  void reconcile(const RecordCounts& in_file,
                 const std::function<bool(const std::string& cell, int round)>& round_complete);
  // Activity records the tracers reported dropped (summed over ranks); the publisher refuses a
  // campaign with any.
  void dropped(std::int64_t n);
  // Records, under `restored_from_snapshot`, that the acquisition file was replaced by its
  // snapshot (store/acquisition_file.h) because of `problem`; the damaged file is kept at
  // `damaged_copy`.
  void record_restore(const std::string& problem, const std::string& damaged_copy);
  [[nodiscard]] double consumed_seconds() const {
    return doc_.value("device_seconds_consumed", 0.0);
  }
  [[nodiscard]] double budget_seconds() const { return budget_; }
  // The wave the previous run was killed in, as this start charged it; nullopt when that run
  // held no wave (it ended, or was killed between waves).
  struct InterruptedWave {
    std::string wave;
    double held_seconds = 0;
    double charged_device_seconds = 0;
    bool from_heartbeat = false;  // false: no heartbeat file, nothing charged
  };
  [[nodiscard]] const std::optional<InterruptedWave>& interrupted() const { return interrupted_; }
  [[nodiscard]] const nlohmann::json& document() const { return doc_; }

 private:
  void save() const;
  std::filesystem::path path_;
  double budget_;
  nlohmann::json doc_;
  std::optional<InterruptedWave> interrupted_;
};

// Throws std::runtime_error when `dir`/campaign.json exists and its written-record counters do not
// balance with the rows in complete rounds of the acquisition file (or records dropped rows).
void check_record_balance(const std::filesystem::path& dir, const RecordCounts& rows_in_file);

// Why rows in complete rounds of an acquisition file cannot be what `dir`/campaign.json's counters
// say (fewer than `written` or more than `encoded`, the test of CampaignState::reconcile);
// nullopt when they can or there is no campaign state. Throws as load_campaign_document does.
[[nodiscard]] std::optional<std::string> unexplained_rows(const std::filesystem::path& dir,
                                                          const RecordCounts& rows_in_file);

// Where a campaign stands (`harness plan --campaign`): the point-rounds its waves committed
// (refinement's included), the device time it consumed, its phase, and the measured cost per
// point-round that `plan` predicts from (nullopt before any point-round).
struct CampaignProgress {
  std::int64_t expert_point_rounds = 0;
  std::int64_t local_point_rounds = 0;
  double device_seconds_consumed = 0;
  std::string phase;
  std::optional<MeasuredCost> measured;
  // Measured / nominal cost per kind of cell ("<target label> <component>"), as acquire predicts
  // the cells it has not measured from (CampaignState::cost_ratios).
  std::map<std::string, double> cost_ratios;
};
// What `dir`/campaign.json records, if it exists; throws std::runtime_error when the file is not
// valid JSON (or fails its digest).
[[nodiscard]] std::optional<CampaignProgress> read_campaign_progress(
    const std::filesystem::path& dir);

// SHA-256 of the running executable (/proc/self/exe).
[[nodiscard]] std::string executable_sha256();

}  // namespace moe
