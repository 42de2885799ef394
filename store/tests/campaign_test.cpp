#include "store/campaign.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/files.h"
#include "core/timestamp.h"
#include "store/tests/scratch_dir.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class Campaign : public ScratchDirTest {
 protected:
  Campaign() : ScratchDirTest("campaign_test_") {}
  CampaignState state() const { return CampaignState(dir_, "harness acquire", "job", "f", 3600); }
  nlohmann::json records() const {
    std::ifstream f(dir_ / kCampaignFile);
    return nlohmann::json::parse(f)["records"];
  }
};

nlohmann::json document(const fs::path& dir) {
  std::ifstream f(dir / kCampaignFile);
  return nlohmann::json::parse(f);
}

using Round = CampaignState::WaveRound;

// A wave of `rows` with no rounds to account, committed.
void commit_rows(CampaignState& s, const RecordCounts& rows) {
  s.encoded(rows, {});
  s.committed(1.0, 1);
}

// The start of a run's reconcile when the file holds no round of any pending wave.
bool no_round(const std::string&, int) {
  return false;
}

// A kill after a wave was encoded and before any flag was set: the next run finds only the
// earlier rounds, records the wave as lost in flight and goes on (it used to throw on the
// missing lost_in_flight counter, and every rerun refused the campaign).
TEST_F(Campaign, AWaveKilledBeforeItsFlagsIsLostInFlightAndResumes) {
  {
    auto s = state();
    commit_rows(s, {100, 10, 20});
    s.encoded({50, 5, 10}, {});  // the wave in flight when the kill came
  }
  auto s = state();
  s.reconcile({100, 10, 20}, no_round);
  EXPECT_EQ(records()["lost_in_flight"],
            (nlohmann::json{{"samples", 50}, {"medians", 5}, {"checks", 10}}));
  EXPECT_EQ(records()["written"]["samples"], 100);
  EXPECT_EQ(records()["encoded"]["samples"], 100);
  // A second resume of the same state changes nothing.
  auto again = state();
  again.reconcile({100, 10, 20}, no_round);
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 50);
}

// The test a restored snapshot must pass (ranks/acquire.cpp): rows between written and encoded
// are explained, fewer or more are not, and no campaign state explains anything.
TEST_F(Campaign, UnexplainedRowsNamesCountersTheFileDoesNotFit) {
  EXPECT_EQ(unexplained_rows(dir_, {5, 5, 5}), std::nullopt);  // no campaign.json yet
  {
    auto s = state();
    commit_rows(s, {100, 10, 20});
    s.encoded({50, 5, 10}, {});
  }
  EXPECT_EQ(unexplained_rows(dir_, {100, 10, 20}), std::nullopt);
  EXPECT_EQ(unexplained_rows(dir_, {150, 15, 30}), std::nullopt);
  const auto fewer = unexplained_rows(dir_, {60, 6, 12});  // a torn file that lost rounds
  ASSERT_TRUE(fewer.has_value());
  EXPECT_NE(fewer->find("do not balance"), std::string::npos) << *fewer;
  EXPECT_TRUE(unexplained_rows(dir_, {151, 15, 30}).has_value());
  // Reading leaves the state as it was: the next run's reconcile still sees the wave in flight.
  auto s = state();
  s.reconcile({100, 10, 20}, no_round);
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 50);
}

// A kill between two ranks' flag writes: part of the wave is complete in the file.
TEST_F(Campaign, AWavePartlyFlaggedCountsWhatTheFileHolds) {
  {
    auto s = state();
    s.encoded({100, 10, 20}, {});
  }
  auto s = state();
  s.reconcile({60, 6, 12}, no_round);
  EXPECT_EQ(records()["written"],
            (nlohmann::json{{"samples", 60}, {"medians", 6}, {"checks", 12}}));
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 40);
}

// A kill after a wave's commit and before its accounting (the campaign_budget_resume flake: a
// complete campaign counted fewer point-rounds than it measured): the next start accounts the
// rounds the file holds complete, once, and drops the rest, which are measured again.
TEST_F(Campaign, APendingWaveIsAccountedForTheRoundsTheFileHolds) {
  const std::vector<Round> wave = {{"experts.0", 2, true, 6.0, 30},
                                   {"experts.1", 2, true, 4.0, 20},
                                   {"gate.0", 2, false, 1.5, 12}};
  {
    auto s = state();
    commit_rows(s, {100, 10, 20});
    s.reserve("round 2", 50, 2);
    s.encoded({60, 6, 12}, wave);
  }
  // The file holds experts.0 and gate.0 of round 2 complete: one rank's flags were set.
  const auto held = [](const std::string& cell, int round) {
    return round == 2 && (cell == "experts.0" || cell == "gate.0");
  };
  {
    auto s = state();
    s.reconcile({140, 14, 28}, held);
  }
  auto doc = document(dir_);
  EXPECT_FALSE(doc.contains("pending_wave"));
  EXPECT_EQ(doc["cost"]["expert_point_rounds"], 30);
  EXPECT_DOUBLE_EQ(doc["cost"]["expert_seconds"].get<double>(), 6.0);
  EXPECT_EQ(doc["cost"]["local_point_rounds"], 12);
  EXPECT_EQ(doc["cell_rounds_done"], 2);
  ASSERT_EQ(doc["recovered_waves"].size(), 1u);
  EXPECT_EQ(doc["recovered_waves"][0]["cell_rounds_pending"], 3);
  EXPECT_EQ(doc["recovered_waves"][0]["cell_rounds_complete_in_file"], 2);
  EXPECT_EQ(records()["written"]["samples"], 140);
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 20);
  // The next start finds nothing pending: nothing is counted twice.
  {
    auto s = state();
    s.reconcile({140, 14, 28}, held);
  }
  doc = document(dir_);
  EXPECT_EQ(doc["cost"]["expert_point_rounds"], 30);
  EXPECT_EQ(doc["recovered_waves"].size(), 1u);
  // A wave whose commit finished entirely: all of it is accounted.
  {
    auto s = state();
    s.encoded({60, 6, 12}, {{"experts.1", 3, true, 4.0, 20}});
  }
  {
    auto s = state();
    s.reconcile({200, 20, 40}, [](const std::string&, int) { return true; });
  }
  doc = document(dir_);
  EXPECT_EQ(doc["cost"]["expert_point_rounds"], 50);
  EXPECT_EQ(doc["cell_rounds_done"], 3);
  EXPECT_EQ(records()["written"]["samples"], 200);
  EXPECT_EQ(records()["lost_in_flight"]["samples"], 20);
}

TEST_F(Campaign, RowsTheCountersCannotExplainAreRefused) {
  {
    auto s = state();
    commit_rows(s, {100, 10, 20});
  }
  auto s = state();
  EXPECT_THROW(s.reconcile({120, 12, 24}, no_round), std::runtime_error);
  EXPECT_THROW(s.reconcile({90, 9, 18}, no_round), std::runtime_error);
}

TEST_F(Campaign, TheBudgetIsFixedAtTheStartAndRaisedOnlyExplicitly) {
  (void)state();  // 3600 s
  EXPECT_THROW(CampaignState(dir_, "harness acquire --gpu-hours 2", "job", "f", 7200), BudgetError);
  EXPECT_EQ(document(dir_)["budget_seconds"], 3600.0) << "a refused raise changes nothing";
  (void)CampaignState(dir_, "harness acquire --gpu-hours 2 --raise-budget", "job", "f", 7200, true);
  (void)CampaignState(dir_, "harness acquire --gpu-hours 0.5", "job", "f", 1800);  // lowering
  const auto doc = document(dir_);
  EXPECT_EQ(doc["budget_seconds"], 1800.0);
  ASSERT_EQ(doc["budget_changes"].size(), 2u);
  EXPECT_EQ(doc["budget_changes"][0]["to_seconds"], 7200.0);
  EXPECT_EQ(doc["budget_changes"][0]["command"], "harness acquire --gpu-hours 2 --raise-budget");
  EXPECT_EQ(doc["budget_changes"][1]["to_seconds"], 1800.0);
}

// The families name the kernels a campaign's rows were checked against: another table is another
// campaign, while an edited job file is only recorded (its contract decides the rest).
TEST_F(Campaign, AnotherFamilyTableIsRefusedAnEditedJobIsRecorded) {
  (void)state();
  try {
    (void)CampaignState(dir_, "harness acquire", "job", "g", 3600);
    FAIL() << "resumed with another operator-family table";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "refusing to resume " + (dir_ / kCampaignFile).string() +
                  ": the operator-family table changed (family_table_sha256); use another --out");
  }
  EXPECT_FALSE(document(dir_).contains("job_changes"));
  (void)CampaignState(dir_, "harness acquire", "job, edited", "f", 3600);
  EXPECT_EQ(document(dir_)["job_changes"].size(), 1u);
}

// What `plan --campaign` says of a campaign: the point-rounds and device time its waves recorded.
TEST_F(Campaign, ProgressIsWhatTheWavesRecorded) {
  EXPECT_EQ(read_campaign_progress(dir_), std::nullopt);  // no campaign.json
  {
    auto s = state();
    s.set_phase("measuring round 0");
    commit_rows(s, {});
    const auto before =
        read_campaign_progress(dir_);  // no point-round yet: nothing to predict from
    ASSERT_TRUE(before.has_value());
    EXPECT_EQ(before->measured, std::nullopt);
    EXPECT_EQ(before->expert_point_rounds, 0);
    s.encoded({}, {{"e", 0, true, 6.0, 30}, {"g", 0, false, 1.5, 12}});
    s.committed(2.0, 4);
    s.encoded({}, {{"e", 1, true, 2.0, 10}, {"g", 1, false, 0.5, 3}});
    s.committed(2.0, 4);
    s.set_phase("measuring round 2");
  }
  const auto p = read_campaign_progress(dir_);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->expert_point_rounds, 40);
  EXPECT_EQ(p->local_point_rounds, 15);
  EXPECT_DOUBLE_EQ(p->device_seconds_consumed, document(dir_)["device_seconds_consumed"]);
  EXPECT_GT(p->device_seconds_consumed, 0.0);
  EXPECT_EQ(p->phase, "measuring round 2");
  EXPECT_EQ(document(dir_)["cell_rounds_done"], 4);
  ASSERT_TRUE(p->measured.has_value());  // what `plan` predicts from: seconds per point-round
  EXPECT_DOUBLE_EQ(p->measured->expert_point_round_s, 8.0 / 40);
  EXPECT_DOUBLE_EQ(p->measured->local_point_round_s, 2.0 / 15);
  EXPECT_NE(p->measured->source.find("55 point-rounds"), std::string::npos) << p->measured->source;
}

// The cost ratios a resume predicts from: the latest per kind, kept across runs; a kind a run
// did not measure keeps its earlier ratio.
TEST_F(Campaign, CostRatiosAreTheLatestPerKindAcrossRuns) {
  {
    auto s = state();
    EXPECT_TRUE(s.cost_ratios().empty());
    s.record_cost_ratios(
        {{"tp1/dp1_ep1_rank0_sp0 experts", 2.5}, {"tp1/dp1_ep1_rank0_sp0 gate_routing", 0.8}});
    s.record_cost_ratios({{"tp1/dp1_ep1_rank0_sp0 experts", 4.0}});
  }
  const auto ratios = state().cost_ratios();  // a resumed run's state
  EXPECT_EQ(ratios, (std::map<std::string, double>{{"tp1/dp1_ep1_rank0_sp0 experts", 4.0},
                                                   {"tp1/dp1_ep1_rank0_sp0 gate_routing", 0.8}}));
}

TEST_F(Campaign, AnEditedOrDigestlessStateIsRefused) {
  (void)state();
  auto doc = document(dir_);
  doc["device_seconds_consumed"] = 0.5;  // someone hands back budget
  std::ofstream(dir_ / kCampaignFile) << doc.dump(1);
  try {
    (void)state();
    FAIL() << "an edited campaign.json was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("edited outside the harness"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)read_campaign_progress(dir_), std::runtime_error);
  EXPECT_THROW(check_record_balance(dir_, {}), std::runtime_error);
  doc.erase("digest");
  std::ofstream(dir_ / kCampaignFile) << doc.dump(1);
  try {
    (void)state();
    FAIL() << "a campaign.json without digest was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("has no digest"), std::string::npos) << e.what();
  }
}

// A document whose digest holds but whose fields have the wrong types (a harness bug, not an
// edit): read_campaign_progress names the file as malformed instead of escaping with a bare
// JSON type error.
TEST_F(Campaign, AWellSignedDocumentWithWrongTypesIsMalformed) {
  {
    auto s = state();
    s.encoded({}, {{"e", 0, true, 6.0, 30}});
    s.committed(1.0, 1);
  }
  auto doc = document(dir_);
  doc["cost"]["expert_point_rounds"] = "thirty";
  doc.erase("digest");
  doc["digest"] = sha256_hex(doc.dump());  // as the harness signs it
  std::ofstream(dir_ / kCampaignFile) << doc.dump(1);
  try {
    (void)read_campaign_progress(dir_);
    FAIL() << "a campaign.json with a string point count was read";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir_ / kCampaignFile).string() + " is malformed ("), std::string::npos)
        << what;
    EXPECT_EQ(what.find("edited outside the harness"), std::string::npos) << what;
  }
}

TEST_F(Campaign, AnInterruptedWaveIsChargedFromItsStartToTheLastHeartbeat) {
  {
    auto s = state();
    s.reserve("round 3", 100, 4);
    EXPECT_EQ(document(dir_)["reservation"]["devices"], 4);
  }
  // The run died 30 s after the wave started: its heartbeat file was last written then.
  auto doc = document(dir_);
  const auto started = *parse_utc(doc["reservation"]["started_utc"].get<std::string>());
  std::ofstream(dir_ / kHeartbeatFile) << "0\n";
  const auto beat =
      std::chrono::file_clock::from_sys(std::chrono::system_clock::from_time_t(started + 30));
  fs::last_write_time(dir_ / kHeartbeatFile, beat);
  auto s = state();
  doc = document(dir_);
  EXPECT_FALSE(doc.contains("reservation"));
  ASSERT_EQ(doc["interrupted_waves"].size(), 1u);
  EXPECT_EQ(doc["interrupted_waves"][0]["wave"], "round 3");
  EXPECT_DOUBLE_EQ(doc["interrupted_waves"][0]["held_seconds"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(s.consumed_seconds(), 120.0) << "4 devices x 30 s";
  // What acquire tells the user on resuming.
  ASSERT_TRUE(s.interrupted().has_value());
  EXPECT_EQ(s.interrupted()->wave, "round 3");
  EXPECT_DOUBLE_EQ(s.interrupted()->held_seconds, 30.0);
  EXPECT_DOUBLE_EQ(s.interrupted()->charged_device_seconds, 120.0);
  EXPECT_TRUE(s.interrupted()->from_heartbeat);
  EXPECT_FALSE(state().interrupted().has_value()) << "the next start finds no reservation";
  // A finished wave releases its reservation: nothing is charged twice.
  s.reserve("round 4", 10, 4);
  s.encoded({}, {});
  s.committed(2.0, 4);
  EXPECT_FALSE(document(dir_).contains("reservation"));
  EXPECT_DOUBLE_EQ(state().consumed_seconds(), 128.0);
}

TEST_F(Campaign, TheGateAndDroppedRecordsAreCharged) {
  charge_campaign(dir_, "co-location gate (quick profile)", 12.5);  // before any acquire
  auto s = state();
  EXPECT_DOUBLE_EQ(s.consumed_seconds(), 12.5);
  charge_campaign(dir_, "co-location gate (default profile)", 7.5);
  EXPECT_DOUBLE_EQ(state().consumed_seconds(), 20.0);
  auto doc = document(dir_);
  ASSERT_EQ(doc["charges"].size(), 2u);
  EXPECT_EQ(doc["charges"][1]["what"], "co-location gate (default profile)");
  EXPECT_EQ(doc["job_sha256"], sha256_hex("job"));
  auto again = state();
  commit_rows(again, {10, 1, 1});
  again.dropped(3);
  EXPECT_EQ(records()["dropped"], 3);
  EXPECT_THROW(check_record_balance(dir_, {10, 1, 1}), std::runtime_error) << "dropped records";
}

}  // namespace
}  // namespace moe
