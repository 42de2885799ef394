// GPU tests (label `gpu`): CUPTI per-forward attribution on the real device; skipped without one.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "comm/collectives.h"
#include "kernels/workload.h"
#include "ranks/collectives_phase.h"
#include "ranks/forward_timer.h"
#include "ranks/protocol.h"

namespace moe {
namespace {

// The collectives' kernel column: every aligned op of a (one-rank) NCCL communicator yields one
// positive CUPTI record, all-to-all included, and the steady-state figure is positive.
TEST(CuptiTimer, TimesEachCollectiveOpOnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(nullptr, nullptr);
    std::atexit([] { MPI_Finalize(); });
  }
  auto comm = make_nccl_communicator(MPI_COMM_SELF, 0);
  auto timer = make_cupti_timer();
  for (auto op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter, CollectiveOp::all_reduce,
                  CollectiveOp::all_to_all}) {
    const auto times = collective_kernel_times(*comm, *timer, op, 8 << 20, 5, 2);
    ASSERT_EQ(times.size(), 5u) << to_string(op);
    for (double t : times) {
      EXPECT_GT(t, 0.0) << to_string(op);
      EXPECT_LT(t, 1e5) << to_string(op);
    }
    EXPECT_GT(steady_state_us(*comm, op, 8 << 20, 5), 0.0) << to_string(op);
  }
  EXPECT_EQ(timer->dropped(), 0u);
}

TEST(CuptiTimer, PerForwardSumsArePositiveStableAndNothingIsDropped) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto backend = make_cuda_backend("cublas_grouped", 0);
  auto timer = make_cupti_timer();
  EXPECT_EQ(timer->method(), "cupti_activity");
  for (auto component : {Component::gate_routing, Component::experts, Component::finalize_copy}) {
    CellRoundSpec spec;
    spec.base.geometry = *find_preset("qwen3-30b-a3b");
    spec.base.target = {1, 2, 2, 0, false};
    spec.base.component = component;
    spec.points =
        component == Component::experts
            ? std::vector<GridPoint>{{1, 1, 1}, {64, 16, 128}, {256, 64, 1024}, {32, 0, 0}}
            : std::vector<GridPoint>{{1, 0, 0}, {512, 0, 0}};
    spec.iterations = 6;
    spec.weight_banks = 2;
    spec.seed = 7;
    const auto r = measure_cell_round(*backend, *timer, spec);
    ASSERT_FALSE(r.samples.empty());
    std::map<int, std::set<std::int32_t>> counts;
    for (const auto& s : r.samples) {
      EXPECT_GT(s.value_us, 0.0);
      EXPECT_LT(s.value_us, 1e5);
      EXPECT_GT(s.activity_count, 0);
      counts[s.point].insert(s.activity_count);
    }
    for (const auto& [p, c] : counts)
      EXPECT_EQ(c.size(), 1u) << "unstable activity count at point " << p;
    EXPECT_EQ(timer->dropped(), 0u);
    // Each point's clock, stamped around the forwards of each chunk: a real SM clock, at most the
    // GPU's maximum where NVML gives it.
    const auto state = backend->live_state();
    for (const auto& m : r.medians) {
      EXPECT_GT(m.sm_clock_mean_mhz, 100.0) << "point " << m.point;
      if (const auto max = state.find("sm_clock_max_mhz"); max != state.end()) {
        EXPECT_LE(m.sm_clock_mean_mhz, 1.02 * std::stod(max->second)) << "point " << m.point;
      }
    }
  }
}

// Host-clock and CUPTI must agree on the order of magnitude for a large experts point: the
// CUPTI value excludes launch gaps, so it cannot exceed the host time of the same forwards.
TEST(CuptiTimer, DeviceTimeDoesNotExceedHostTime) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto backend = make_cuda_backend("cublas_grouped", 0);
  auto timer = make_cupti_timer();
  WorkloadSpec spec{*find_preset("qwen3-30b-a3b"),
                    {1, 1, 1, 0, false},
                    Component::experts,
                    {1024, 128, 8192},
                    2,
                    3};
  auto w = backend->make(spec, backend->make_weights(spec));
  (void)w->verify();
  auto host = make_host_clock_timer();
  for (int i = 0; i < 4; ++i) {
    host->begin();
    timer->begin();
    w->forward(i % 2);
    timer->end();
    w->synchronize();
    host->end();
  }
  const auto device = timer->collect();
  const auto wall = host->collect();
  ASSERT_EQ(device.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_GT(device[i].value_us, 0.0);
    EXPECT_LE(device[i].value_us, wall[i].value_us * 1.01);
  }
}

}  // namespace
}  // namespace moe
