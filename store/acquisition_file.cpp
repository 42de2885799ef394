#include "store/acquisition_file.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/checked_call.h"
#include "core/contract.h"
#include "core/files.h"
#include "core/statistics.h"
#include "core/timestamp.h"
#include "store/hdf5_handle.h"
#include "store/mpi_gather.h"

namespace moe {

void write_string_attr(hid_t obj, const std::string& name, const std::string& value) {
  auto type = H5_OPEN(H5Tcopy(H5T_C_S1), H5Tclose);
  HARNESS_CHECK_H5(H5Tset_size(type, std::max<std::size_t>(1, value.size())));
  HARNESS_CHECK_H5(H5Tset_strpad(type, H5T_STR_NULLPAD));
  auto space = H5_OPEN(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(obj, name.c_str()) > 0) HARNESS_CHECK_H5(H5Adelete(obj, name.c_str()));
  auto attr =
      H5_OPEN(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  HARNESS_CHECK_H5(H5Awrite(attr, type, padded.data()));
}

namespace {

H5Id point_type() {
  auto t = H5_OPEN(H5Tcreate(H5T_COMPOUND, sizeof(GridPoint)), H5Tclose);
  HARNESS_CHECK_H5(H5Tinsert(t, "tokens", HOFFSET(GridPoint, tokens), H5T_NATIVE_INT64));
  HARNESS_CHECK_H5(H5Tinsert(t, "activated", HOFFSET(GridPoint, activated), H5T_NATIVE_INT64));
  HARNESS_CHECK_H5(H5Tinsert(t, "assignments", HOFFSET(GridPoint, assignments), H5T_NATIVE_INT64));
  return t;
}

H5Id sample_type() {
  auto t = H5_OPEN(H5Tcreate(H5T_COMPOUND, sizeof(Sample)), H5Tclose);
  HARNESS_CHECK_H5(H5Tinsert(t, "point", HOFFSET(Sample, point), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "round", HOFFSET(Sample, round), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "arm", HOFFSET(Sample, arm), H5T_NATIVE_INT8));
  HARNESS_CHECK_H5(H5Tinsert(t, "bank", HOFFSET(Sample, bank), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "forward", HOFFSET(Sample, forward), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "value_us", HOFFSET(Sample, value_us), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "activity_count", HOFFSET(Sample, activity_count), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "name_hash", HOFFSET(Sample, name_hash), H5T_NATIVE_UINT64));
  return t;
}

H5Id check_type() {
  auto t = H5_OPEN(H5Tcreate(H5T_COMPOUND, sizeof(CorrectnessCheck)), H5Tclose);
  HARNESS_CHECK_H5(H5Tinsert(t, "point", HOFFSET(CorrectnessCheck, point), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "round", HOFFSET(CorrectnessCheck, round), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "bank", HOFFSET(CorrectnessCheck, bank), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "relative_error", HOFFSET(CorrectnessCheck, relative_error), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(H5Tinsert(t, "pass", HOFFSET(CorrectnessCheck, pass), H5T_NATIVE_INT8));
  return t;
}

H5Id median_type() {
  auto t = H5_OPEN(H5Tcreate(H5T_COMPOUND, sizeof(PointMedian)), H5Tclose);
  HARNESS_CHECK_H5(H5Tinsert(t, "point", HOFFSET(PointMedian, point), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "round", HOFFSET(PointMedian, round), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "median_us", HOFFSET(PointMedian, median_us), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "median_b_us", HOFFSET(PointMedian, median_b_us), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "median_2b_us", HOFFSET(PointMedian, median_2b_us), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(H5Tinsert(t, "sm_clock_mean_mhz", HOFFSET(PointMedian, sm_clock_mean_mhz),
                             H5T_NATIVE_DOUBLE));
  return t;
}

H5Id collective_type() {
  auto t = H5_OPEN(H5Tcreate(H5T_COMPOUND, sizeof(CollectiveRow)), H5Tclose);
  auto name = H5_OPEN(H5Tcopy(H5T_C_S1), H5Tclose);
  HARNESS_CHECK_H5(H5Tset_size(name, sizeof(CollectiveRow::name)));
  auto op = H5_OPEN(H5Tcopy(H5T_C_S1), H5Tclose);
  HARNESS_CHECK_H5(H5Tset_size(op, sizeof(CollectiveRow::op)));
  HARNESS_CHECK_H5(H5Tinsert(t, "name", HOFFSET(CollectiveRow, name), name));
  HARNESS_CHECK_H5(H5Tinsert(t, "op", HOFFSET(CollectiveRow, op), op));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "group_size", HOFFSET(CollectiveRow, group_size), H5T_NATIVE_INT32));
  HARNESS_CHECK_H5(H5Tinsert(t, "tokens", HOFFSET(CollectiveRow, tokens), H5T_NATIVE_INT64));
  HARNESS_CHECK_H5(H5Tinsert(t, "bytes", HOFFSET(CollectiveRow, bytes), H5T_NATIVE_INT64));
  HARNESS_CHECK_H5(H5Tinsert(t, "time_us", HOFFSET(CollectiveRow, time_us), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "algbw_gbps", HOFFSET(CollectiveRow, algbw_gbps), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "busbw_gbps", HOFFSET(CollectiveRow, busbw_gbps), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "model_time_us", HOFFSET(CollectiveRow, model_time_us), H5T_NATIVE_DOUBLE));
  HARNESS_CHECK_H5(
      H5Tinsert(t, "steady_time_us", HOFFSET(CollectiveRow, steady_time_us), H5T_NATIVE_DOUBLE));
  return t;
}

void write_int_attr(hid_t obj, const std::string& name, long long value) {
  auto space = H5_OPEN(H5Screate(H5S_SCALAR), H5Sclose);
  auto attr = H5_OPEN(
      H5Acreate2(obj, name.c_str(), H5T_NATIVE_LLONG, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  HARNESS_CHECK_H5(H5Awrite(attr, H5T_NATIVE_LLONG, &value));
}

std::string read_string_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) throw FileError("missing attribute '" + name + "'");
  auto attr = H5_OPEN(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  auto ftype = H5_OPEN(H5Aget_type(attr), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING)
    throw FileError("attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(ftype) > 0) throw FileError("attribute '" + name + "' is variable-length");
  const auto size = H5Tget_size(ftype);
  auto mtype = H5_OPEN(H5Tcopy(H5T_C_S1), H5Tclose);
  HARNESS_CHECK_H5(H5Tset_size(mtype, size));
  HARNESS_CHECK_H5(H5Tset_strpad(mtype, H5T_STR_NULLPAD));
  std::string s(size, '\0');
  HARNESS_CHECK_H5(H5Aread(attr, mtype, s.data()));
  s.resize(std::strlen(s.c_str()));
  return s;
}

// Text too large for an attribute's 64 KiB (a JSON document) is stored as a byte dataset.
void write_text_dataset(hid_t group, const std::string& name, const std::string& text) {
  const hsize_t n = text.size();
  auto space = H5_OPEN(H5Screate_simple(1, &n, nullptr), H5Sclose);
  auto d = H5_OPEN(H5Dcreate2(group, name.c_str(), H5T_NATIVE_UCHAR, space, H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT),
                   H5Dclose);
  if (n)
    HARNESS_CHECK_H5(H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()));
}

std::string read_text_dataset(hid_t group, const std::string& name) {
  auto d = H5_OPEN(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  auto space = H5_OPEN(H5Dget_space(d), H5Sclose);
  const auto n = H5Sget_simple_extent_npoints(space);
  if (n < 0) throw FileError("unreadable dataset '" + name + "'");
  std::string text(static_cast<std::size_t>(n), '\0');
  if (n) HARNESS_CHECK_H5(H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()));
  return text;
}

long long read_int_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) throw FileError("missing attribute '" + name + "'");
  auto attr = H5_OPEN(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  long long v = 0;
  HARNESS_CHECK_H5(H5Aread(attr, H5T_NATIVE_LLONG, &v));
  return v;
}

H5Id create_dataset(hid_t parent, const std::string& name, hid_t type, std::size_t rows) {
  const hsize_t dims[1] = {rows};
  auto space = H5_OPEN(H5Screate_simple(1, dims, nullptr), H5Sclose);
  return H5_OPEN(
      H5Dcreate2(parent, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose);
}

template <class T>
void write_all(hid_t dset, hid_t type, const std::vector<T>& rows) {
  if (rows.empty()) return;
  HARNESS_CHECK_H5(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()));
}

template <class T>
std::vector<T> read_all(hid_t parent, const std::string& name, hid_t type) {
  auto d = H5_OPEN(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
  auto space = H5_OPEN(H5Dget_space(d), H5Sclose);
  hsize_t n = 0;
  if (H5Sget_simple_extent_ndims(space) != 1) throw FileError("dataset '" + name + "' is not 1-D");
  HARNESS_CHECK_H5(H5Sget_simple_extent_dims(space, &n, nullptr));
  std::vector<T> rows(n);
  if (n) HARNESS_CHECK_H5(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()));
  return rows;
}

bool link_exists(hid_t parent, const std::string& path) {
  return H5Lexists(parent, path.c_str(), H5P_DEFAULT) > 0;
}

std::string contract_difference(const std::string& stored, const std::string& wanted) {
  try {
    return json_difference(nlohmann::json::parse(stored), nlohmann::json::parse(wanted));
  } catch (const nlohmann::json::exception&) {
    return "unparseable stored contract";
  }
}

// The /provenance group, created on first use.
H5Id provenance_group(hid_t root) {
  return link_exists(root, "provenance")
             ? H5_OPEN(H5Gopen2(root, "provenance", H5P_DEFAULT), H5Gclose)
             : H5_OPEN(H5Gcreate2(root, "provenance", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       H5Gclose);
}

int provenance_runs(hid_t group) {
  int runs = 0;
  while (H5Aexists(group, ("run_" + std::to_string(runs)).c_str()) > 0) ++runs;
  return runs;
}

// Copies `from` to the snapshot `snapshot` through a temporary and a rename: a kill leaves the
// previous snapshot or the new one, never a torn one.
void copy_through_rename(const std::string& from, const std::string& snapshot) {
  const std::string copying = snapshot + ".copying";
  try {
    std::filesystem::copy_file(from, copying, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(copying, snapshot);
  } catch (const std::filesystem::filesystem_error& e) {
    throw FileError("cannot snapshot '" + from + "' to '" + snapshot + "' (" + e.code().message() +
                    "); the file and its previous snapshot are intact");
  }
}

}  // namespace

struct AcquisitionFile::Impl {
  MPI_Comm comm;
  int rank = 0, size = 1;
  std::string path;
  H5Id file;
  std::vector<CellInfo> cells;
  int snapshots = 0;
  double snapshot_seconds = 0;
  // Rank 0: copies `from` (the file, or the file being created) to the file's snapshot, timed.
  void snapshot(const std::string& from) {
    const auto start = std::chrono::steady_clock::now();
    copy_through_rename(from, snapshot_path(path));
    snapshot_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // The n of /provenance run_<n> that rounds are committed under: the latest run (a run writes
  // its provenance, write_provenance, before it commits); -1 before any.
  int run = -1;
};

AcquisitionFile::AcquisitionFile(MPI_Comm comm, const std::string& path,
                                 const FileIdentity& identity)
    : impl_(std::make_unique<Impl>()) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported through FileError
  impl_->comm = comm;
  impl_->path = path;
  HARNESS_CHECK_MPI(MPI_Comm_rank(comm, &impl_->rank));
  HARNESS_CHECK_MPI(MPI_Comm_size(comm, &impl_->size));
  int exists = impl_->rank == 0 ? static_cast<int>(std::filesystem::exists(path)) : 0;
  HARNESS_CHECK_MPI(MPI_Bcast(&exists, 1, MPI_INT, 0, comm));
  auto fapl = H5_OPEN(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  HARNESS_CHECK_H5(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  const auto sha = sha256_hex(identity.contract_json);
  if (!exists) {
    // Made under a temporary name and renamed once its root is written and closed: a kill during
    // creation leaves no half-made file at `path` to refuse on resume (the next run overwrites
    // the temporary).
    const std::string creating = path + ".creating";
    const hid_t created = H5Fcreate(creating.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (created < 0) throw FileError("cannot create acquisition file '" + creating + "'");
    H5Id file(created, H5Fclose);
    write_int_attr(file, "schema_version", kSchemaVersion);
    write_string_attr(file, "contract_sha256", sha);
    write_string_attr(file, "contract", identity.contract_json);
    write_string_attr(file, "units", "time: microseconds (us); sizes: bytes");
    for (const auto& [k, v] : identity.attributes) write_string_attr(file, k, v);
    H5_OPEN(H5Gcreate2(file, "cells", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    file.close();  // collective
    // Its snapshot is taken before it gets its name: a kill inside the first flush (the cells'
    // declaration) can tear the file, and a resume restores it only from a snapshot.
    int renamed = 1;
    std::string why;
    if (impl_->rank == 0) {
      try {
        impl_->snapshot(creating);
        std::filesystem::rename(creating, path);
      } catch (const std::exception& e) {
        renamed = 0;
        why = e.what();
      }
    }
    HARNESS_CHECK_MPI(MPI_Bcast(&renamed, 1, MPI_INT, 0, comm));
    if (!renamed)
      throw FileError("cannot make '" + path + "' from '" + creating + "'" +
                      (why.empty() ? std::string(" (see rank 0)") : ": " + why));
    ++impl_->snapshots;
  }
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl);
  if (f < 0)
    throw FileError("cannot open existing acquisition file '" + path +
                    "' (corrupt, truncated or not HDF5); it was left untouched: move it aside or "
                    "choose another --out");
  impl_->file = H5Id(f, H5Fclose);
  resumed_ = exists != 0;
  long long schema = 0;
  std::string stored_sha, stored_contract;
  try {
    schema = read_int_attr(f, "schema_version");
    stored_sha = read_string_attr(f, "contract_sha256");
    stored_contract = read_string_attr(f, "contract");
  } catch (const std::runtime_error& e) {
    throw FileError("'" + path + "' is not a harness acquisition file: " + e.what());
  }
  if (schema != kSchemaVersion)
    throw SchemaVersionError("'" + path + "' has schema version " + std::to_string(schema) +
                             ", this harness writes " + std::to_string(kSchemaVersion));
  if (sha256_hex(stored_contract) != stored_sha)
    throw FileError("'" + path +
                    "': stored contract does not match its SHA-256 (tampered or corrupt)");
  const bool has_runs = link_exists(f, "provenance");
  if (stored_sha != sha) {
    std::optional<std::pair<int, int>> raise;
    try {
      raise = refinement_cap_raise(nlohmann::json::parse(stored_contract),
                                   nlohmann::json::parse(identity.contract_json));
    } catch (const nlohmann::json::exception&) {
    }
    if (!raise)
      throw FileError("'" + path + "' holds a different contract (differs in: " +
                      contract_difference(stored_contract, identity.contract_json) +
                      "); it was left untouched: use another --out to measure the new contract");
    // The one change a resume may make (core/contract.h): the contract takes the larger cap and
    // the file records the raise under the run that makes it (its provenance comes next), then a
    // snapshot holds both; a kill between the writes leaves a contract that fails its SHA-256,
    // which the next start restores from the snapshot before and raises again.
    auto raises = H5Aexists(f, "refinement_cap_raises") > 0
                      ? nlohmann::json::parse(read_string_attr(f, "refinement_cap_raises"))
                      : nlohmann::json::array();
    raises.push_back({{"run", has_runs ? provenance_runs(provenance_group(f)) : 0},
                      {"from", raise->first},
                      {"to", raise->second}});
    write_string_attr(f, "refinement_cap_raises", raises.dump());
    write_string_attr(f, "contract", identity.contract_json);
    write_string_attr(f, "contract_sha256", sha);
    cap_raise_ = raise;
    flush_and_snapshot();
  }
  // Reopened within a run (between refinement stages), its rounds belong to the latest run.
  if (has_runs) impl_->run = provenance_runs(provenance_group(f)) - 1;
}

AcquisitionFile::~AcquisitionFile() {
  // Closing is collective: a rank unwinding from an error alone must not wait for the others
  // here (they would never come); the caller aborts the job, and committed rounds are on disk.
  if (std::uncaught_exceptions() > 0 && impl_) impl_->file.abandon();
}

void AcquisitionFile::declare_cells(const std::vector<CellInfo>& cells) {
  impl_->cells = cells;
  auto cells_group = H5_OPEN(H5Gopen2(impl_->file, "cells", H5P_DEFAULT), H5Gclose);
  const auto ptype = point_type();
  for (const auto& c : cells) {
    if (link_exists(cells_group, c.id)) {
      auto g = H5_OPEN(H5Gopen2(cells_group, c.id.c_str(), H5P_DEFAULT), H5Gclose);
      const auto stored = read_all<GridPoint>(g, "points", ptype);
      if (stored != c.points)
        throw FileError("cell " + c.id + " in '" + impl_->path + "' has a different grid");
      continue;
    }
    auto g = H5_OPEN(H5Gcreate2(cells_group, c.id.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Gclose);
    write_string_attr(g, "cell", c.json);
    auto pts = create_dataset(g, "points", ptype, c.points.size());
    if (impl_->rank == 0) write_all(pts, ptype, c.points);
    const hsize_t dims[1] = {static_cast<hsize_t>(c.rounds)};
    auto space = H5_OPEN(H5Screate_simple(1, dims, nullptr), H5Sclose);
    auto dcpl = H5_OPEN(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    const std::int8_t zero = 0;
    HARNESS_CHECK_H5(H5Pset_fill_value(dcpl, H5T_NATIVE_INT8, &zero));
    HARNESS_CHECK_H5(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    HARNESS_CHECK_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_ALLOC));
    auto done = H5_OPEN(
        H5Dcreate2(g, "rounds_done", H5T_NATIVE_INT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
        H5Dclose);
  }
  flush_and_snapshot();
}

std::vector<std::int8_t> AcquisitionFile::rounds_done(int cell) const {
  const auto& c = impl_->cells.at(static_cast<std::size_t>(cell));
  auto g = H5_OPEN(H5Gopen2(impl_->file, ("cells/" + c.id).c_str(), H5P_DEFAULT), H5Gclose);
  return read_all<std::int8_t>(g, "rounds_done", H5T_NATIVE_INT8);
}

RecordCounts AcquisitionFile::complete_rows() const {
  RecordCounts n;
  for (std::size_t c = 0; c < impl_->cells.size(); ++c) {
    const auto done = rounds_done(static_cast<int>(c));
    for (std::size_t r = 0; r < done.size(); ++r) {
      if (!done[r]) continue;
      const std::string base = "cells/" + impl_->cells[c].id + "/round_" + std::to_string(r) + "/";
      const auto rows = [&](const char* name) {
        auto d = H5_OPEN(H5Dopen2(impl_->file, (base + name).c_str(), H5P_DEFAULT), H5Dclose);
        auto space = H5_OPEN(H5Dget_space(d), H5Sclose);
        hsize_t extent = 0;
        HARNESS_CHECK_H5(H5Sget_simple_extent_dims(space, &extent, nullptr));
        return static_cast<std::int64_t>(extent);
      };
      n += {rows("samples"), rows("medians"), rows("checks")};
    }
  }
  return n;
}

RecordCounts StoredAcquisition::complete_rows() const {
  RecordCounts n;
  for (const auto& c : cells)
    for (const auto& r : c.rounds)
      n +=
          {static_cast<std::int64_t>(r.samples.size()), static_cast<std::int64_t>(r.medians.size()),
           static_cast<std::int64_t>(r.checks.size())};
  return n;
}

namespace {

// A round's record in the commit exchange: cell, round, 3 sizes, point-order seed, rank, and its
// SHA-256 as 4 words, so that every rank can write the same (collective) attributes.
constexpr std::size_t kCommitRecord = 11;

template <typename T>
void append_bytes(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string hex_of_words(const long long* words) {
  std::string out;
  char buf[17];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(words[i]));
    out += buf;
  }
  return out;
}

}  // namespace

std::string round_sha256(const CellRound& r) {
  std::string bytes;
  append_bytes(bytes, r.point_order_seed);
  for (const auto& x : r.samples) {
    append_bytes(bytes, x.point), append_bytes(bytes, x.round), append_bytes(bytes, x.arm);
    append_bytes(bytes, x.bank), append_bytes(bytes, x.forward), append_bytes(bytes, x.value_us);
    append_bytes(bytes, x.activity_count), append_bytes(bytes, x.name_hash);
  }
  for (const auto& x : r.checks) {
    append_bytes(bytes, x.point), append_bytes(bytes, x.round), append_bytes(bytes, x.bank);
    append_bytes(bytes, x.relative_error), append_bytes(bytes, x.pass);
  }
  for (const auto& x : r.medians) {
    append_bytes(bytes, x.point), append_bytes(bytes, x.round), append_bytes(bytes, x.median_us);
    append_bytes(bytes, x.median_b_us), append_bytes(bytes, x.median_2b_us);
    append_bytes(bytes, x.sm_clock_mean_mhz);
  }
  return sha256_hex(bytes);
}

void AcquisitionFile::commit(const std::vector<std::pair<int, const CellRound*>>& mine) {
  // Every rank learns every (cell, round, sizes, digest) so that metadata is created
  // collectively.
  std::vector<long long> local;
  for (const auto& [cell, r] : mine) {
    local.insert(local.end(), {cell, r->round, static_cast<long long>(r->samples.size()),
                               static_cast<long long>(r->checks.size()),
                               static_cast<long long>(r->medians.size()),
                               static_cast<long long>(r->point_order_seed), impl_->rank});
    const auto digest = round_sha256(*r);
    for (int w = 0; w < 4; ++w)
      local.push_back(static_cast<long long>(
          std::stoull(digest.substr(static_cast<std::size_t>(16 * w), 16), nullptr, 16)));
  }
  std::vector<long long> all;
  for (const auto& part : gather_vectors(impl_->comm, local))
    all.insert(all.end(), part.begin(), part.end());

  const auto stype = sample_type(), ctype = check_type(), mtype = median_type();
  std::size_t mine_index = 0;
  for (std::size_t i = 0; i + kCommitRecord <= all.size(); i += kCommitRecord) {
    const int cell = static_cast<int>(all[i]), round = static_cast<int>(all[i + 1]);
    const auto& info = impl_->cells.at(static_cast<std::size_t>(cell));
    auto cg = H5_OPEN(H5Gopen2(impl_->file, ("cells/" + info.id).c_str(), H5P_DEFAULT), H5Gclose);
    const std::string name = "round_" + std::to_string(round);
    if (link_exists(cg, name))
      HARNESS_CHECK_H5(H5Ldelete(cg, name.c_str(), H5P_DEFAULT));  // partial round
    auto rg =
        H5_OPEN(H5Gcreate2(cg, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    write_int_attr(rg, "point_order_seed", all[i + 5]);
    write_string_attr(rg, "sha256", hex_of_words(&all[i + 7]));
    if (impl_->run >= 0) write_int_attr(rg, "run", impl_->run);
    write_int_attr(rg, "rank", all[i + 6]);
    auto ds = create_dataset(rg, "samples", stype, static_cast<std::size_t>(all[i + 2]));
    auto dc = create_dataset(rg, "checks", ctype, static_cast<std::size_t>(all[i + 3]));
    auto dm = create_dataset(rg, "medians", mtype, static_cast<std::size_t>(all[i + 4]));
    if (all[i + 6] == impl_->rank) {
      const auto& r = *mine.at(mine_index++).second;
      write_all(ds, stype, r.samples);
      write_all(dc, ctype, r.checks);
      write_all(dm, mtype, r.medians);
    }
  }
  HARNESS_CHECK_H5(H5Fflush(impl_->file, H5F_SCOPE_GLOBAL));
  // Completion flags only after the data is durable.
  for (std::size_t i = 0; i + kCommitRecord <= all.size(); i += kCommitRecord) {
    const auto& info = impl_->cells.at(static_cast<std::size_t>(all[i]));
    auto d =
        H5_OPEN(H5Dopen2(impl_->file, ("cells/" + info.id + "/rounds_done").c_str(), H5P_DEFAULT),
                H5Dclose);
    if (all[i + 6] != impl_->rank) continue;
    auto fspace = H5_OPEN(H5Dget_space(d), H5Sclose);
    const hsize_t start[1] = {static_cast<hsize_t>(all[i + 1])}, one[1] = {1};
    HARNESS_CHECK_H5(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, one, nullptr));
    auto mspace = H5_OPEN(H5Screate_simple(1, one, nullptr), H5Sclose);
    const std::int8_t flag = 1;
    HARNESS_CHECK_H5(H5Dwrite(d, H5T_NATIVE_INT8, mspace, fspace, H5P_DEFAULT, &flag));
  }
  flush_and_snapshot();
}

bool AcquisitionFile::has_collectives(const std::string& target_id) const {
  return link_exists(impl_->file, "collectives") &&
         link_exists(impl_->file, "collectives/" + target_id);
}

void AcquisitionFile::write_collectives(
    const std::vector<std::pair<std::string, std::vector<CollectiveRow>>>& mine,
    const std::string& backend) {
  // Names and sizes from every rank, so that datasets are created collectively.
  std::string local;
  for (const auto& [id, rows] : mine) local += id + "=" + std::to_string(rows.size()) + ";";
  const auto parts = gather_strings(impl_->comm, local);
  hid_t root = impl_->file;
  H5Id g = link_exists(root, "collectives")
               ? H5_OPEN(H5Gopen2(root, "collectives", H5P_DEFAULT), H5Gclose)
               : H5_OPEN(H5Gcreate2(root, "collectives", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         H5Gclose);
  const auto type = collective_type();
  for (int r = 0; r < impl_->size; ++r) {
    const std::string& part = parts[static_cast<std::size_t>(r)];
    std::size_t pos = 0;
    while (pos < part.size()) {
      const auto eq = part.find('=', pos), semi = part.find(';', pos);
      const std::string id = part.substr(pos, eq - pos);
      const auto rows = static_cast<std::size_t>(std::stoll(part.substr(eq + 1, semi - eq - 1)));
      pos = semi + 1;
      if (link_exists(g, id)) continue;  // measured by an earlier run
      auto d = create_dataset(g, id, type, rows);
      write_string_attr(d, "backend", backend);
      if (r != impl_->rank) continue;
      for (const auto& [my_id, my_rows] : mine)
        if (my_id == id) write_all(d, type, my_rows);
    }
  }
  flush_and_snapshot();
}

namespace {

// Every run's provenance, oldest first (none when the file has no /provenance yet).
std::vector<StoredAcquisition::Run> read_runs(hid_t root) {
  std::vector<StoredAcquisition::Run> runs;
  if (!link_exists(root, "provenance")) return runs;
  auto g = H5_OPEN(H5Gopen2(root, "provenance", H5P_DEFAULT), H5Gclose);
  for (int n = 0, count = provenance_runs(g); n < count; ++n) {
    const auto name = "run_" + std::to_string(n);
    runs.push_back({read_string_attr(g, name), H5Aexists(g, (name + "_end").c_str()) > 0
                                                   ? read_string_attr(g, name + "_end")
                                                   : std::string()});
  }
  return runs;
}

std::string gathered_list(MPI_Comm comm, const std::string& mine) {
  auto list = nlohmann::json::array();
  for (const auto& part : gather_strings(comm, mine)) list.push_back(nlohmann::json::parse(part));
  return list.dump();
}

}  // namespace

void AcquisitionFile::write_provenance(const std::string& mine) {
  const auto list = gathered_list(impl_->comm, mine);
  auto g = provenance_group(impl_->file);
  // Each (re)start appends its provenance; earlier runs of a resumed acquisition are kept.
  impl_->run = provenance_runs(g);
  write_string_attr(g, "run_" + std::to_string(impl_->run), list);
  flush_and_snapshot();
}

void AcquisitionFile::write_provenance_end(const std::string& mine) {
  const auto list = gathered_list(impl_->comm, mine);
  auto g = provenance_group(impl_->file);
  const int runs = provenance_runs(g);
  if (runs == 0) throw FileError("no run to end: write_provenance was never called");
  write_string_attr(g, "run_" + std::to_string(runs - 1) + "_end", list);
  flush_and_snapshot();
}

void AcquisitionFile::flush_and_snapshot() {
  HARNESS_CHECK_H5(H5Fflush(impl_->file, H5F_SCOPE_GLOBAL));
  // Every rank's writes are in the file before rank 0 copies it, and none starts the next
  // write before the copy is done.
  HARNESS_CHECK_MPI(MPI_Barrier(impl_->comm));
  if (impl_->rank == 0) impl_->snapshot(impl_->path);
  ++impl_->snapshots;
  HARNESS_CHECK_MPI(MPI_Barrier(impl_->comm));
}

int AcquisitionFile::snapshots() const {
  return impl_->snapshots;
}

double AcquisitionFile::snapshot_seconds() const {
  return impl_->snapshot_seconds;
}

std::vector<std::string> AcquisitionFile::provenance_starts() const {
  std::vector<std::string> starts;
  for (const auto& run : read_runs(impl_->file)) starts.push_back(run.start);
  return starts;
}

namespace {

// What to do about an acquisition file that cannot be read when a crash snapshot of it exists.
std::string snapshot_hint(const std::string& path) {
  const auto snapshot = snapshot_path(path);
  return std::filesystem::exists(snapshot)
             ? " (re-running its `harness acquire` command resumes from the crash snapshot '" +
                   snapshot + "')"
             : "";
}

// Opens an acquisition file read-only (serial) and checks its schema version.
H5Id open_for_reading(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0)
    throw FileError("cannot open acquisition file '" + path + "' (missing, corrupt or not HDF5)" +
                    snapshot_hint(path));
  H5Id file(f, H5Fclose);
  long long schema = 0;
  try {
    schema = read_int_attr(f, "schema_version");
  } catch (const std::runtime_error& e) {
    throw FileError("'" + path + "': " + e.what());
  }
  if (schema != kSchemaVersion)
    throw SchemaVersionError("'" + path + "': has schema version " + std::to_string(schema) +
                             ", this harness reads " + std::to_string(kSchemaVersion) +
                             " (acquire it again with this harness)");
  return file;
}

// The names of /cells, in the file's order.
std::vector<std::string> cell_names(hid_t cells) {
  hsize_t n = 0;
  HARNESS_CHECK_H5(H5Gget_num_objs(cells, &n));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < n; ++i) {
    char name[512];
    if (H5Gget_objname_by_idx(cells, i, name, sizeof(name)) < 0)
      throw FileError("unreadable cell name");
    names.emplace_back(name);
  }
  return names;
}

// A cell's description and its rounds_done flags.
CellInfo read_cell_info(hid_t g, const std::string& name, std::vector<std::int8_t>& rounds_done) {
  CellInfo info;
  info.id = name;
  info.json = read_string_attr(g, "cell");
  info.points = read_all<GridPoint>(g, "points", point_type());
  rounds_done = read_all<std::int8_t>(g, "rounds_done", H5T_NATIVE_INT8);
  info.rounds = static_cast<int>(rounds_done.size());
  return info;
}

}  // namespace

std::vector<CellInfo> read_cell_infos(const std::string& path) {
  const auto file = open_for_reading(path);
  std::vector<CellInfo> out;
  try {
    auto cells = H5_OPEN(H5Gopen2(file, "cells", H5P_DEFAULT), H5Gclose);
    std::vector<std::int8_t> rounds_done;
    for (const auto& name : cell_names(cells)) {
      auto g = H5_OPEN(H5Gopen2(cells, name.c_str(), H5P_DEFAULT), H5Gclose);
      out.push_back(read_cell_info(g, name, rounds_done));
    }
  } catch (const std::runtime_error& e) {
    throw FileError("'" + path + "': " + e.what());
  }
  return out;
}

namespace {

// A complete round must match the SHA-256 stored with it, and every stored median must be the
// median of its samples (all forwards; per bank arm) — a file edited or damaged after it was
// written is refused, not published.
void verify_round(hid_t round_group, const CellRound& r, const std::string& cell) {
  const auto where = "cell " + cell + " round " + std::to_string(r.round);
  if (H5Aexists(round_group, "sha256") <= 0)
    throw FileError(where + " has no sha256 (written by an older harness); acquire it again");
  if (read_string_attr(round_group, "sha256") != round_sha256(r))
    throw FileError(where +
                    ": its data does not match its SHA-256 (the file was modified or "
                    "damaged after it was written)");
  std::map<std::int32_t, std::array<std::vector<double>, 3>> values;  // point -> all, B, 2B
  for (const auto& s : r.samples) {
    auto& v = values[s.point];
    v[0].push_back(s.value_us);
    if (s.arm == static_cast<std::int8_t>(Arm::banks)) v[1].push_back(s.value_us);
    if (s.arm == static_cast<std::int8_t>(Arm::double_banks)) v[2].push_back(s.value_us);
  }
  for (const auto& m : r.medians) {
    const auto it = values.find(m.point);
    if (it == values.end())
      throw FileError(where + ": point " + std::to_string(m.point) +
                      " has a median but no samples");
    const auto& v = it->second;
    const double all = median(v[0]);
    const double b = v[1].empty() ? all : median(v[1]), b2 = v[2].empty() ? all : median(v[2]);
    if (m.median_us != all || m.median_b_us != b || m.median_2b_us != b2)
      throw FileError(where + ": the stored median of point " + std::to_string(m.point) +
                      " is not the median of its samples");
  }
}

}  // namespace

StoredAcquisition read_acquisition(const std::string& path) {
  const auto file = open_for_reading(path);
  const hid_t f = file;
  StoredAcquisition out;
  try {
    out.contract_json = read_string_attr(f, "contract");
    out.contract_sha256 = read_string_attr(f, "contract_sha256");
    if (sha256_hex(out.contract_json) != out.contract_sha256)
      throw FileError("stored contract does not match its SHA-256");
    for (const char* k : {"harness_revision", "backend", "timing", "geometry", "job", "variant",
                          "out_root", "refinement_cap_raises"})
      if (H5Aexists(f, k) > 0) out.attributes[k] = read_string_attr(f, k);
    auto cells = H5_OPEN(H5Gopen2(f, "cells", H5P_DEFAULT), H5Gclose);
    const auto stype = sample_type(), ctype = check_type(), mtype = median_type();
    for (const auto& name : cell_names(cells)) {
      StoredCell c;
      auto g = H5_OPEN(H5Gopen2(cells, name.c_str(), H5P_DEFAULT), H5Gclose);
      c.info = read_cell_info(g, name, c.rounds_done);
      for (std::size_t r = 0; r < c.rounds_done.size(); ++r) {
        if (!c.rounds_done[r]) continue;
        auto rg =
            H5_OPEN(H5Gopen2(g, ("round_" + std::to_string(r)).c_str(), H5P_DEFAULT), H5Gclose);
        CellRound cr;
        cr.round = static_cast<std::int32_t>(r);
        cr.point_order_seed = static_cast<std::uint64_t>(read_int_attr(rg, "point_order_seed"));
        if (H5Aexists(rg, "run") > 0) cr.run = static_cast<std::int32_t>(read_int_attr(rg, "run"));
        if (H5Aexists(rg, "rank") > 0)
          cr.rank = static_cast<std::int32_t>(read_int_attr(rg, "rank"));
        cr.samples = read_all<Sample>(rg, "samples", stype);
        cr.checks = read_all<CorrectnessCheck>(rg, "checks", ctype);
        cr.medians = read_all<PointMedian>(rg, "medians", mtype);
        verify_round(rg, cr, name);
        c.rounds.push_back(std::move(cr));
      }
      out.cells.push_back(std::move(c));
    }
    if (link_exists(f, "collectives")) {
      auto g = H5_OPEN(H5Gopen2(f, "collectives", H5P_DEFAULT), H5Gclose);
      hsize_t count = 0;
      HARNESS_CHECK_H5(H5Gget_num_objs(g, &count));
      const auto coll_type = collective_type();
      for (hsize_t i = 0; i < count; ++i) {
        char name[512];
        if (H5Gget_objname_by_idx(g, i, name, sizeof(name)) < 0)
          throw FileError("unreadable collectives name");
        auto d = H5_OPEN(H5Dopen2(g, name, H5P_DEFAULT), H5Dclose);
        out.collectives.push_back(
            {name, read_string_attr(d, "backend"), read_all<CollectiveRow>(g, name, coll_type)});
      }
    }
    out.runs = read_runs(f);
    if (link_exists(f, "fidelity")) {
      auto g = H5_OPEN(H5Gopen2(f, "fidelity", H5P_DEFAULT), H5Gclose);
      for (int n = 0; link_exists(g, "evaluation_" + std::to_string(n)); ++n)
        out.fidelity_evaluations.push_back(read_text_dataset(g, "evaluation_" + std::to_string(n)));
    }
  } catch (const std::runtime_error& e) {
    throw FileError("'" + path + "': " + e.what() + snapshot_hint(path));
  }
  return out;
}

int append_fidelity_evaluation(const std::string& path, const std::string& json) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  // Written into a copy that replaces the file once closed: a kill inside HDF5's flush would
  // otherwise tear the file (see take_snapshot).
  const std::string appending = path + ".appending";
  std::filesystem::copy_file(path, appending, std::filesystem::copy_options::overwrite_existing);
  int n = 0;
  {
    const hid_t f = H5Fopen(appending.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) throw FileError("cannot open acquisition file '" + path + "' to record fidelity");
    H5Id file(f, H5Fclose);
    H5Id g =
        link_exists(f, "fidelity")
            ? H5_OPEN(H5Gopen2(f, "fidelity", H5P_DEFAULT), H5Gclose)
            : H5_OPEN(H5Gcreate2(f, "fidelity", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    while (link_exists(g, "evaluation_" + std::to_string(n))) ++n;
    write_text_dataset(g, "evaluation_" + std::to_string(n), json);
    g.close();
    file.close();
  }
  std::filesystem::rename(appending, path);
  take_snapshot(path);
  return n;
}

std::string snapshot_path(const std::string& path) {
  return path + ".snapshot";
}

void take_snapshot(const std::string& path) {
  copy_through_rename(path, snapshot_path(path));
}

namespace {

// Opens every attribute of `obj` and reads it.
herr_t read_attribute(hid_t obj, const char* name, const H5A_info_t*, void*) {
  const hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return -1;
  H5Id attr(a, H5Aclose);
  const hid_t type = H5Aget_type(a);
  if (type < 0) return -1;
  H5Id t(type, H5Tclose);
  const auto bytes = H5Aget_storage_size(a);
  std::vector<unsigned char> buffer(std::max<hsize_t>(bytes, 1));
  // A variable-length string would be read into memory HDF5 allocates; the harness writes none.
  return H5Tis_variable_str(type) > 0 ? 0 : H5Aread(a, type, buffer.data());
}

// Opens the object a link names, reads its attributes and (datasets) its data; the first failure
// stops the walk and is named in `damage`.
herr_t visit_link(hid_t group, const char* name, const H5L_info_t*, void* damage) {
  const auto fail = [&](const char* what) {
    *static_cast<std::string*>(damage) = std::string("cannot ") + what + " '" + name + "'";
    return -1;
  };
  const hid_t o = H5Oopen(group, name, H5P_DEFAULT);
  if (o < 0) return fail("open object");
  H5Id obj(o, H5Oclose);
  if (H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, read_attribute, nullptr) < 0)
    return fail("read the attributes of");
  if (H5Iget_type(o) != H5I_DATASET) return 0;
  const hid_t type = H5Dget_type(o);
  if (type < 0) return fail("read the type of");
  H5Id t(type, H5Tclose);
  const hid_t space = H5Dget_space(o);
  if (space < 0) return fail("read the shape of");
  H5Id sp(space, H5Sclose);
  const auto elements = H5Sget_simple_extent_npoints(space);
  const auto size = H5Tget_size(type);
  if (elements < 0 || size == 0) return fail("read the shape of");
  std::vector<unsigned char> data(static_cast<std::size_t>(elements) * size + 1);
  if (elements > 0 && H5Dread(o, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0)
    return fail("read the data of");
  return 0;
}

}  // namespace

std::optional<std::string> unparsable_json(const StoredAcquisition& acq) {
  using Type = nlohmann::json::value_t;
  // Each text is what harness wrote: a cell's description is an object, a run's provenance a
  // list (one entry per rank), a held-out evaluation an object, the cap raises a list.
  const auto check = [](const std::string& text, Type type,
                        const std::string& what) -> std::optional<std::string> {
    try {
      if (nlohmann::json::parse(text).type() == type) return std::nullopt;
      return what + " is JSON but not " + (type == Type::object ? "an object" : "a list");
    } catch (const nlohmann::json::exception& e) {
      return what + " is not JSON (" + e.what() + ")";
    }
  };
  for (const auto& cell : acq.cells)
    if (auto bad = check(cell.info.json, Type::object, "the description of cell " + cell.info.id))
      return bad;
  for (std::size_t r = 0; r < acq.runs.size(); ++r) {
    const auto run = "the provenance of run " + std::to_string(r);
    if (auto bad = check(acq.runs[r].start, Type::array, run)) return bad;
    if (!acq.runs[r].end.empty())
      if (auto bad = check(acq.runs[r].end, Type::array, run + " (its end)")) return bad;
  }
  for (std::size_t i = 0; i < acq.fidelity_evaluations.size(); ++i)
    if (auto bad = check(acq.fidelity_evaluations[i], Type::object,
                         "held-out evaluation " + std::to_string(i)))
      return bad;
  if (const auto raises = acq.attributes.find("refinement_cap_raises");
      raises != acq.attributes.end())
    if (auto bad = check(raises->second, Type::array, "the record of refinement cap raises"))
      return bad;
  return std::nullopt;
}

std::optional<std::string> hdf5_damage(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return "HDF5 cannot open '" + path + "'";
  H5Id file(f, H5Fclose);
  std::string why;
  if (H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, read_attribute, nullptr) < 0)
    return "cannot read the root attributes of '" + path + "'";
  if (H5Lvisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, visit_link, &why) < 0)
    return "'" + path + "': " + (why.empty() ? std::string("cannot walk its groups") : why);
  return std::nullopt;
}

std::optional<SnapshotRestore> restore_snapshot_if_damaged(
    const std::string& path,
    const std::function<std::optional<std::string>(const std::string&)>& problem) {
  const std::string snapshot = snapshot_path(path);
  if (!std::filesystem::exists(path)) return std::nullopt;
  // What a torn file held can reach a problem's text (a JSON parser quotes the bytes it read):
  // printable, for the messages and for campaign.json.
  const auto printable_problem = [&](const std::string& file) {
    auto why = problem(file);
    if (why) *why = printable_text(*why);
    return why;
  };
  auto why = printable_problem(path);
  if (!why) return std::nullopt;
  // Writing on into a damaged file would tear it further, out of sight until a later read.
  const auto unusable = std::filesystem::exists(snapshot)
                            ? printable_problem(snapshot)
                            : std::optional<std::string>("there is none");
  if (unusable)
    throw FileError("'" + path + "' is damaged or corrupt (" + *why + ") and its crash snapshot '" +
                    snapshot + "' cannot replace it (" + *unusable +
                    "); both were left untouched: move them aside or choose another --out");
  std::string stamp = utc_now();
  std::replace(stamp.begin(), stamp.end(), ':', '-');
  std::string damaged = path + ".damaged-" + stamp;
  for (int n = 1; std::filesystem::exists(damaged); ++n)
    damaged = path + ".damaged-" + stamp + "-" + std::to_string(n);
  // The copy first: if it fails (a full disk), nothing has moved yet.
  const std::string restoring = path + ".restoring";
  try {
    std::filesystem::copy_file(snapshot, restoring,
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(path, damaged);
    std::filesystem::rename(restoring, path);
  } catch (const std::filesystem::filesystem_error& e) {
    throw FileError("'" + path + "' is damaged (" + *why +
                    ") but cannot be replaced by its snapshot '" + snapshot + "' (" +
                    e.code().message() + ")");
  }
  return SnapshotRestore{*why, damaged};
}

}  // namespace moe
