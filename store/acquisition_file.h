// The shared acquisition file: one HDF5 file opened by every rank with the MPI-IO driver
// (docs/hdf5-layout.md). Metadata (groups, datasets, attributes) is created collectively; each rank
// writes its own cells' rows. A round becomes complete only when its `rounds_done` flag is set
// after the round's data was flushed, so a crash leaves at most a partial round, which resume
// discards.
//
// Layout (schema 1):
//   /                          attrs schema_version, contract_sha256, contract (JSON), units, ...
//   /provenance                attrs run_<n>, run_<n>_end (JSON lists, one object per rank)
//   /cells/<cell>              attrs cell (JSON: target, component, planned rounds)
//   /cells/<cell>/points       [P] {tokens, activated, assignments}
//   /cells/<cell>/rounds_done  [R] int8, 1 once round r is complete
//   /cells/<cell>/round_<r>/{samples, medians, checks}   attrs point_order_seed, sha256, run, rank
//   /collectives/<target>      [*] CollectiveRow, attr backend
//   /fidelity/evaluation_<n>   [bytes] JSON of the n-th held-out evaluation (the last is final)
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/component.h"
#include "store/records.h"

namespace moe {

class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file an older (or newer) harness wrote: readable, not damaged, refused by name.
class SchemaVersionError : public FileError {
 public:
  using FileError::FileError;
};

inline constexpr int kSchemaVersion = 2;

struct FileIdentity {
  std::string contract_json;                      // canonical JSON of every semantic condition
  std::map<std::string, std::string> attributes;  // provenance-free descriptive attributes
};

struct CellInfo {
  std::string id;    // group name, e.g. tp1_dp2_ep2_rank0_sp0.experts
  std::string json;  // self-description (target, component, rounds)
  std::vector<GridPoint> points;
  int rounds = 0;
};

class AcquisitionFile {
 public:
  // Collective. Creates `path` when absent. An existing file must carry the same schema and
  // contract, else FileError names what differs; an unreadable file is a FileError, never
  // overwritten.
  AcquisitionFile(MPI_Comm comm, const std::string& path, const FileIdentity& identity);
  ~AcquisitionFile();
  AcquisitionFile(const AcquisitionFile&) = delete;
  AcquisitionFile& operator=(const AcquisitionFile&) = delete;

  [[nodiscard]] bool resumed() const { return resumed_; }
  // {from, to} when this open raised the stored contract's refinement cap (the job asks for a
  // larger fidelity.max_added_points, nothing else changed: core/contract.h); the file records
  // each raise in its attribute refinement_cap_raises ([{run, from, to}]).
  [[nodiscard]] std::optional<std::pair<int, int>> refinement_cap_raised() const {
    return cap_raise_;
  }

  // Collective, same cells in the same order on every rank.
  void declare_cells(const std::vector<CellInfo>& cells);
  [[nodiscard]] std::vector<std::int8_t> rounds_done(int cell) const;
  // Rows in complete rounds of every declared cell (same answer on every rank).
  [[nodiscard]] RecordCounts complete_rows() const;

  // Collective. `mine` holds the rounds this rank completed for its own cells since the last
  // commit; data first, flush, then the completion flags, flush. Each round records the latest
  // run of /provenance and the committing rank (attributes run, rank): a run writes its
  // provenance before it commits.
  void commit(const std::vector<std::pair<int, const CellRound*>>& mine);

  // Collective: stores collective tables (/collectives/<target id>, attr backend). Each rank
  // passes the tables of its own targets. Existing tables are kept (resume).
  void write_collectives(
      const std::vector<std::pair<std::string, std::vector<CollectiveRow>>>& mine,
      const std::string& backend);
  // True when /collectives/<target id> exists (same answer on every rank).
  [[nodiscard]] bool has_collectives(const std::string& target_id) const;

  // Collective: stores every rank's provenance JSON (gathered) as /provenance attribute run_<n>,
  // one per (re)start.
  void write_provenance(const std::string& mine);
  // Collective: every rank's state at the end of this run (gathered) as run_<n>_end of the
  // latest run_<n>.
  void write_provenance_end(const std::string& mine);
  // Collective: the start provenance of every run so far (run_<n>, oldest first), each the JSON
  // list of its ranks.
  [[nodiscard]] std::vector<std::string> provenance_starts() const;

  // Snapshots taken by this object (every collective write ends with one, see take_snapshot)
  // and the seconds rank 0 spent copying (0 on the other ranks).
  [[nodiscard]] int snapshots() const;
  [[nodiscard]] double snapshot_seconds() const;

 private:
  // Flushes, then rank 0 copies the file to its snapshot while every rank waits.
  void flush_and_snapshot();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool resumed_ = false;
  std::optional<std::pair<int, int>> cap_raise_;
};

// SHA-256 (hex) of a round's data, over every field of its samples, checks and medians and its
// point-order seed in a fixed byte order: stored with the round, checked by every reader.
[[nodiscard]] std::string round_sha256(const CellRound& r);

// Serial, while no rank holds the file open collectively (rank 0 between refinement stages):
// appends one held-out evaluation (JSON text) as /fidelity/evaluation_<n>; returns n. The append
// is made on a copy that then replaces `path` (rename), so a kill leaves the old file or the new.
int append_fidelity_evaluation(const std::string& path, const std::string& json);

// Crash recovery (docs/measurement.md#crash-consistency-and-resume). HDF5 does not journal its
// metadata: a process killed inside a flush (or a close) can leave a file HDF5 cannot read, or
// one that lost groups it had. Every collective write of AcquisitionFile (and its creation)
// therefore ends with a snapshot: `<path>.snapshot`, a copy of the file as that flush left it, made
// through a temporary and a rename, so a kill leaves the previous snapshot or the new one, never a
// torn one.
[[nodiscard]] std::string snapshot_path(const std::string& path);
// Serial (no rank writing the file): copies `path` to its snapshot.
void take_snapshot(const std::string& path);
// Serial: why HDF5 cannot read `path` whole -- the file, a link, an object header, an attribute
// or a dataset's data (every object is visited, partial rounds too); nullopt when it can.
[[nodiscard]] std::optional<std::string> hdf5_damage(const std::string& path);
// Serial, before any rank opens `path`: when `problem(path)` names a problem and
// `problem(snapshot)` names none, moves `path` aside to `<path>.damaged-<UTC>` (kept, never
// overwritten) and copies the snapshot into its place. Returns what was done, or nullopt when
// `path` does not exist or has no problem. Problems are reported as printable_text (core/files.h).
// A damaged `path` whose snapshot is missing or has a problem of its own, or a copy that fails (a
// full disk), is a FileError, with nothing moved. (A file has a snapshot from its creation on:
// AcquisitionFile takes one before naming it.)
struct SnapshotRestore {
  std::string problem;       // what was wrong with the file
  std::string damaged_copy;  // where the damaged file now is
};
[[nodiscard]] std::optional<SnapshotRestore> restore_snapshot_if_damaged(
    const std::string& path,
    const std::function<std::optional<std::string>(const std::string&)>& problem);

// Reads a finished or partial acquisition file without MPI collectives (serial, read-only).
struct StoredCell {
  CellInfo info;
  std::vector<std::int8_t> rounds_done;
  std::vector<CellRound> rounds;  // complete rounds only
};
struct StoredCollectives {
  std::string target_id;
  std::string backend;
  std::vector<CollectiveRow> rows;
};
struct StoredAcquisition {
  std::string contract_json;
  std::string contract_sha256;
  std::map<std::string, std::string> attributes;
  std::vector<StoredCell> cells;
  std::vector<StoredCollectives> collectives;
  std::vector<std::string> fidelity_evaluations;  // JSON, in the order they were appended
  struct Run {
    std::string start, end;  // JSON lists of the ranks' provenance; end empty if it never ended
  };
  std::vector<Run> runs;  // /provenance, oldest first
  [[nodiscard]] RecordCounts complete_rows() const;
};
[[nodiscard]] StoredAcquisition read_acquisition(const std::string& path);
// The first text the file keeps as JSON that does not parse as what harness wrote there -- a
// cell's description (an object), a run's provenance, start or end (a list), a held-out evaluation
// (an object) -- named, with the parser's reason; nullopt when every one does. HDF5 reads a torn
// attribute as whatever bytes it holds, so this is damage that hdf5_damage cannot see and a resume
// would fail on.
[[nodiscard]] std::optional<std::string> unparsable_json(const StoredAcquisition& acq);
// Only the cells' descriptions (id, cell JSON, points, planned rounds), in the file's order:
// no round data is read.
[[nodiscard]] std::vector<CellInfo> read_cell_infos(const std::string& path);

}  // namespace moe
