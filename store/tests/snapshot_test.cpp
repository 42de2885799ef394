// Crash recovery of the acquisition file: the damage walk, the snapshot and its restore
// (store/acquisition_file.h). Files here are written serially with plain HDF5 calls.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/files.h"
#include "store/acquisition_file.h"
#include "store/tests/scratch_dir.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class Snapshot : public ScratchDirTest {
 protected:
  Snapshot() : ScratchDirTest("snapshot_test_") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    path_ = (dir_ / "acquisition.h5").string();
  }

  // A file like an acquisition's: a root attribute, a group of groups with datasets in them.
  void write_file(const std::string& path, int value) const {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hsize_t one[1] = {1}, n[1] = {64};
    const hid_t scalar = H5Screate_simple(1, one, nullptr);
    const hid_t a =
        H5Acreate2(f, "schema_version", H5T_NATIVE_INT, scalar, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT, &value), 0);
    H5Aclose(a);
    const hid_t cells = H5Gcreate2(f, "cells", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t space = H5Screate_simple(1, n, nullptr);
    std::vector<int> data(64, value);
    for (int c = 0; c < 4; ++c) {
      const hid_t g = H5Gcreate2(cells, ("cell_" + std::to_string(c)).c_str(), H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT);
      const hid_t d =
          H5Dcreate2(g, "samples", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0);
      H5Dclose(d);
      H5Gclose(g);
    }
    H5Sclose(space);
    H5Sclose(scalar);
    H5Gclose(cells);
    ASSERT_GE(H5Fclose(f), 0);
  }

  // Overwrites the last group symbol-table node ("SNOD") of the file: what a kill inside a flush
  // leaves when the node's new version was never written.
  static void tear(const std::string& path) {
    auto bytes = read_file(path);
    const auto at = bytes.rfind("SNOD");
    ASSERT_NE(at, std::string::npos);
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(at),
              bytes.begin() + static_cast<std::ptrdiff_t>(at) + 64, '\xA5');
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string path_;
};

// A torn attribute reads whole to HDF5 as whatever bytes it holds: the texts a resume parses are
// checked too, each named when it is not JSON.
TEST(StoredJson, ATextThatIsNotJsonIsNamed) {
  StoredAcquisition acq;
  acq.cells.push_back(
      {{"tp1_dp1_ep1_rank0_sp0.experts", R"({"component": "experts"})", {}, 1}, {}, {}});
  acq.runs.push_back({R"([{"rank": 0}])", ""});  // a run that never ended has no end
  acq.fidelity_evaluations.push_back("{}");
  EXPECT_EQ(unparsable_json(acq), std::nullopt);
  const auto named = [](StoredAcquisition a) { return unparsable_json(a).value_or("(none)"); };
  auto bad = acq;
  bad.cells[0].info.json = "{\"target\": tr\xfa";
  EXPECT_EQ(
      named(bad).rfind("the description of cell tp1_dp1_ep1_rank0_sp0.experts is not JSON (", 0),
      0u)
      << named(bad);
  bad = acq;
  bad.runs[0].end = "[{\"rank\": 0";
  EXPECT_EQ(named(bad).rfind("the provenance of run 0 (its end) is not JSON (", 0), 0u)
      << named(bad);
  bad = acq;  // parses, but is not what the resume reads there
  bad.cells[0].info.json = "[1]";
  EXPECT_EQ(named(bad),
            "the description of cell tp1_dp1_ep1_rank0_sp0.experts is JSON but not an object");
  bad = acq;
  bad.runs[0].start = "{}";
  EXPECT_EQ(named(bad), "the provenance of run 0 is JSON but not a list");
  bad = acq;
  bad.fidelity_evaluations.push_back("");
  EXPECT_EQ(named(bad).rfind("held-out evaluation 1 is not JSON (", 0), 0u) << named(bad);
}

TEST_F(Snapshot, TheWalkFindsTornAndTruncatedFilesAndPassesWholeOnes) {
  write_file(path_, 7);
  EXPECT_EQ(hdf5_damage(path_), std::nullopt);
  tear(path_);
  const auto torn = hdf5_damage(path_);
  ASSERT_TRUE(torn.has_value());
  EXPECT_NE(torn->find(path_), std::string::npos) << *torn;
  write_file(path_, 7);
  fs::resize_file(path_, fs::file_size(path_) / 2);
  EXPECT_TRUE(hdf5_damage(path_).has_value());
  EXPECT_TRUE(hdf5_damage((dir_ / "missing.h5").string()).has_value());
}

TEST_F(Snapshot, ASnapshotIsACopyMadeThroughARename) {
  write_file(path_, 7);
  take_snapshot(path_);
  EXPECT_EQ(read_file(snapshot_path(path_)), read_file(path_));
  EXPECT_FALSE(fs::exists(snapshot_path(path_) + ".copying"));
  write_file(path_, 8);  // a later commit replaces the snapshot
  take_snapshot(path_);
  EXPECT_EQ(read_file(snapshot_path(path_)), read_file(path_));
}

// A copy that fails (here: its temporary is a directory; elsewhere a full disk) is one error
// naming both files, and the previous snapshot is left as it was.
TEST_F(Snapshot, AFailedCopyIsAnErrorAndKeepsThePreviousSnapshot) {
  write_file(path_, 7);
  take_snapshot(path_);
  const auto previous = read_file(snapshot_path(path_));
  write_file(path_, 8);
  fs::create_directories(snapshot_path(path_) + ".copying/blocked");
  try {
    take_snapshot(path_);
    ADD_FAILURE() << "the copy into a directory succeeded";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot snapshot '" + path_ + "'"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(snapshot_path(path_)), previous);
}

TEST_F(Snapshot, ADamagedFileIsMovedAsideAndTheSnapshotRestored) {
  write_file(path_, 7);
  take_snapshot(path_);
  const auto snapshot = read_file(snapshot_path(path_));
  write_file(path_, 8);
  tear(path_);
  const auto damaged = read_file(path_);
  const auto restored = restore_snapshot_if_damaged(path_, hdf5_damage);
  ASSERT_TRUE(restored.has_value());
  EXPECT_FALSE(restored->problem.empty());
  EXPECT_EQ(read_file(path_), snapshot);
  EXPECT_EQ(read_file(restored->damaged_copy), damaged);  // kept as it was
  EXPECT_EQ(read_file(snapshot_path(path_)), snapshot);   // still there for the next kill
  EXPECT_EQ(hdf5_damage(path_), std::nullopt);
  // A second damage within the same second gets a copy of its own; nothing is overwritten.
  tear(path_);
  const auto again = restore_snapshot_if_damaged(path_, hdf5_damage);
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->damaged_copy, restored->damaged_copy);
  EXPECT_EQ(read_file(restored->damaged_copy), damaged);
}

// A problem's text quotes what a torn file held (a JSON parser's "last read: ..."): the restore
// reports it printable, in what it returns and in its errors, whatever the caller's check said.
TEST_F(Snapshot, AProblemIsReportedAsPrintableText) {
  write_file(path_, 7);
  take_snapshot(path_);
  const auto raw = [](const std::string& problem) {
    return [problem](const std::string&) { return std::optional<std::string>(problem); };
  };
  const auto file_only = [&](const std::string& file) -> std::optional<std::string> {
    if (file == path_) return "last read: 'tr\xfa'";
    return std::nullopt;
  };
  const auto restored = restore_snapshot_if_damaged(path_, file_only);
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->problem, "last read: 'tr\\xfa'");
  try {
    (void)restore_snapshot_if_damaged(path_, raw("\x01torn"));
    ADD_FAILURE() << "a damaged file without a usable snapshot was kept for writing";
  } catch (const FileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is damaged or corrupt (\\x01torn) and its crash snapshot"),
              std::string::npos)
        << printable_text(what);
    EXPECT_NE(what.find("cannot replace it (\\x01torn)"), std::string::npos)
        << printable_text(what);
  }
}

// publish, inspect and report read the file without restoring it: their error says what does.
TEST_F(Snapshot, AnUnreadableFileNamesItsSnapshot) {
  write_file(path_, 7);
  fs::resize_file(path_, fs::file_size(path_) / 2);
  const auto message = [&] {
    try {
      (void)read_acquisition(path_);
    } catch (const FileError& e) {
      return std::string(e.what());
    }
    return std::string("read");
  };
  EXPECT_EQ(message().find("crash snapshot"), std::string::npos) << message();
  write_file(snapshot_path(path_), 7);
  EXPECT_NE(message().find("resumes from the crash snapshot '" + snapshot_path(path_) + "'"),
            std::string::npos)
      << message();
}

// A restore whose copy fails (here: its temporary is a directory) moves nothing.
TEST_F(Snapshot, ARestoreThatCannotCopyMovesNothing) {
  write_file(path_, 7);
  take_snapshot(path_);
  tear(path_);
  const auto torn = read_file(path_);
  fs::create_directories(path_ + ".restoring/blocked");
  try {
    (void)restore_snapshot_if_damaged(path_, hdf5_damage);
    ADD_FAILURE() << "the restore copied into a directory";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be replaced by its snapshot"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(path_), torn);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".damaged-"), std::string::npos) << e.path();
}

TEST_F(Snapshot, NothingIsTouchedWithoutAProblem) {
  EXPECT_EQ(restore_snapshot_if_damaged(path_, hdf5_damage), std::nullopt);  // no file
  write_file(path_, 7);
  const auto whole = read_file(path_);
  EXPECT_EQ(restore_snapshot_if_damaged(path_, hdf5_damage), std::nullopt);  // no snapshot
  take_snapshot(path_);
  EXPECT_EQ(restore_snapshot_if_damaged(path_, hdf5_damage), std::nullopt);  // file whole
  EXPECT_EQ(read_file(path_), whole);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".damaged-"), std::string::npos) << e.path();
}

// A damaged file that no snapshot can replace is one error naming both, and nothing moves: a
// resume that wrote on into it would tear it further, out of sight until a later read failed.
TEST_F(Snapshot, ADamagedFileWithoutAUsableSnapshotIsAnErrorAndMovesNothing) {
  const auto refused = [&](const std::string& snapshot_problem) {
    const auto torn = read_file(path_);
    const bool had_snapshot = fs::exists(snapshot_path(path_));
    const auto snapshot = had_snapshot ? read_file(snapshot_path(path_)) : std::string();
    try {
      (void)restore_snapshot_if_damaged(path_, hdf5_damage);
      ADD_FAILURE() << "a damaged file was kept for writing";
    } catch (const FileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + path_ + "' is damaged or corrupt ("), std::string::npos) << what;
      const auto cannot = what.find("cannot replace it (");
      ASSERT_NE(cannot, std::string::npos) << what;
      EXPECT_EQ(what.find(snapshot_problem, cannot), cannot + 19) << what;
    }
    EXPECT_EQ(read_file(path_), torn);
    EXPECT_EQ(fs::exists(snapshot_path(path_)), had_snapshot);
    if (had_snapshot) {
      EXPECT_EQ(read_file(snapshot_path(path_)), snapshot);
    }
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().string().find(".damaged-"), std::string::npos) << e.path();
  };
  write_file(path_, 7);
  tear(path_);
  refused("there is none");
  write_file(snapshot_path(path_), 7);
  tear(snapshot_path(path_));
  refused(std::string("'").append(snapshot_path(path_)).append("': "));  // the walk names it
}

}  // namespace
}  // namespace moe
