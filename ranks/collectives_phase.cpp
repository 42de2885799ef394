#include "ranks/collectives_phase.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include "comm/collectives.h"
#include "core/checked_call.h"
#include "core/statistics.h"

namespace moe {

namespace {

class CommGuard {
 public:
  explicit CommGuard(MPI_Comm c) : c_(c) {}
  ~CommGuard() {
    if (c_ != MPI_COMM_NULL) HARNESS_CHECK_MPI_NOTHROW(MPI_Comm_free(&c_));
  }
  CommGuard(const CommGuard&) = delete;
  CommGuard& operator=(const CommGuard&) = delete;
  [[nodiscard]] MPI_Comm get() const { return c_; }

 private:
  MPI_Comm c_;
};

std::unique_ptr<Communicator> communicator(MPI_Comm c, int nccl_device) {
  return nccl_device >= 0 ? make_nccl_communicator(c, nccl_device) : make_mpi_communicator(c);
}

}  // namespace

std::vector<double> collective_kernel_times(Communicator& c, ForwardTimer& timer, CollectiveOp op,
                                            std::int64_t bytes, int iterations, int warmup) {
  for (int i = 0; i < warmup; ++i) c.run(op, bytes);
  const std::string label(to_string(op));
  for (int i = 0; i < iterations; ++i) {
    c.barrier();
    timer.begin(label);
    c.launch(op, bytes);
    timer.end();
    c.synchronize();
  }
  std::vector<double> out;
  for (const auto& r : timer.collect()) out.push_back(r.value_us);
  if (static_cast<int>(out.size()) != iterations)
    throw std::runtime_error("the timer returned " + std::to_string(out.size()) + " records for " +
                             std::to_string(iterations) + " " + label + " ops");
  return out;
}

namespace {

CollectiveOp op_of(const std::string& name) {
  for (auto op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter, CollectiveOp::all_reduce,
                  CollectiveOp::all_to_all})
    if (to_string(op) == name) return op;
  throw std::invalid_argument("unknown collective op '" + name + "'");
}

}  // namespace

CollectivesReport measure_collectives(MPI_Comm comm, const Plan& plan, int nccl_device,
                                      AcquisitionFile& file, ForwardTimer& timer,
                                      Watchdog* watchdog) {
  int rank = 0, size = 1;
  HARNESS_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HARNESS_CHECK_MPI(MPI_Comm_size(comm, &size));
  CollectivesReport report;
  const auto& job = plan.job;
  // Deployments in plan order, and the targets whose tables the plan wants.
  // Every rank of a deployment has the same local token axis; it comes from the plan.
  std::vector<std::pair<Target, const std::vector<std::int64_t>*>> deployments;
  std::set<std::string> wanted;
  for (const auto& t : plan.targets) {
    wanted.insert(t.target.cell_id());
    Target d = t.target;
    d.rank = 0;
    if (std::none_of(deployments.begin(), deployments.end(),
                     [&](const auto& known) { return known.first == d; }))
      deployments.emplace_back(d, &t.local_tokens);
  }
  std::vector<std::pair<std::string, std::vector<CollectiveRow>>> mine;
  const std::string backend = nccl_device >= 0 ? "nccl" : "mpi_host";
  for (const auto& [d, tokens] : deployments) {
    if (d.ep < 2) continue;  // a single rank has no collectives
    if (d.ep > size) {
      report.skipped.push_back("TP" + std::to_string(d.tp) + " DP" + std::to_string(d.dp) +
                               " needs " + std::to_string(d.ep) + " ranks, the job has " +
                               std::to_string(size));
      continue;
    }
    bool done = true;
    for (int r = 0; r < d.ep; ++r) {
      Target t = d;
      t.rank = r;
      if (wanted.count(t.cell_id()) && !file.has_collectives(t.cell_id())) done = false;
    }
    if (done) continue;
    MPI_Comm dep_raw = MPI_COMM_NULL;
    HARNESS_CHECK_MPI(MPI_Comm_split(comm, rank < d.ep ? 0 : MPI_UNDEFINED, rank, &dep_raw));
    CommGuard dep(dep_raw);
    if (rank < d.ep) {
      Target t = d;
      t.rank = rank;
      const int dp_index = rank / d.tp, tp_index = rank % d.tp;
      MPI_Comm tp_raw = MPI_COMM_NULL, gather_raw = MPI_COMM_NULL;
      HARNESS_CHECK_MPI(MPI_Comm_split(dep.get(), dp_index, tp_index, &tp_raw));
      CommGuard tp_comm(tp_raw);
      if (t.sp)
        HARNESS_CHECK_MPI(MPI_Comm_dup(dep.get(), &gather_raw));
      else
        HARNESS_CHECK_MPI(MPI_Comm_split(dep.get(), tp_index, dp_index, &gather_raw));
      CommGuard gather_comm(gather_raw);
      std::map<std::string, std::unique_ptr<Communicator>> comms;
      comms["tp"] = communicator(tp_comm.get(), nccl_device);
      comms["gather"] = communicator(gather_comm.get(), nccl_device);
      comms["ep"] = communicator(dep.get(), nccl_device);
      std::vector<CollectiveRow> rows;
      for (const auto& c : collective_cases(job.geometry, t, *tokens)) {
        auto& cm = *comms.at(c.group);
        // Expected: every op of the case at 1 GB/s plus 1 ms, far slower than any real fabric.
        const double ops = 1.0 + job.rounds * (2.0 * job.iterations + 2.0);
        const WatchdogScope watch(watchdog, "operation",
                                  "collective " + c.name + " of " + std::to_string(c.total_bytes) +
                                      " bytes over " + std::to_string(c.group_size) + " ranks",
                                  ops * (1e-3 + static_cast<double>(c.total_bytes) / 1e9));
        if (!cm.check(c.op, c.total_bytes))
          throw std::runtime_error(c.name + " over " + std::to_string(c.group_size) +
                                   " ranks returned wrong data (" + backend + ")");
        std::vector<double> round_medians, steady;
        for (int r = 0; r < job.rounds; ++r) {
          round_medians.push_back(
              median(collective_kernel_times(cm, timer, c.op, c.total_bytes, job.iterations, 2)));
          steady.push_back(steady_state_us(cm, c.op, c.total_bytes, job.iterations));
        }
        CollectiveRow row{};
        std::strncpy(row.name, c.name.c_str(), sizeof(row.name) - 1);
        std::strncpy(row.op, std::string(to_string(c.op)).c_str(), sizeof(row.op) - 1);
        row.group_size = c.group_size;
        row.tokens = c.tokens;
        row.bytes = c.total_bytes;
        row.time_us = *median_of_medians(round_medians);
        row.steady_time_us = median(steady);
        const auto bw = bandwidth(c.op, c.group_size, c.total_bytes, row.time_us);
        row.algbw_gbps = bw.algbw_gbps;
        row.busbw_gbps = bw.busbw_gbps;
        rows.push_back(row);
      }
      // Ring envelope per collective: per-step latency from the smallest size, bandwidth from the
      // best measured bus bandwidth; evaluated at every measured size.
      std::map<std::string, std::pair<double, double>> fit;  // name -> (alpha_us, beta bytes/us)
      for (const auto& row : rows) {
        const auto op = op_of(row.op);
        const double steps =
            op == CollectiveOp::all_reduce ? 2.0 * (row.group_size - 1) : row.group_size - 1.0;
        auto& [alpha, beta] = fit.try_emplace(row.name, 1e300, 0.0).first->second;
        alpha = std::min(alpha, row.time_us / steps);
        beta = std::max(beta, row.busbw_gbps * 1e3);
      }
      for (auto& row : rows) {
        const auto op = op_of(row.op);
        const std::int64_t per_rank =
            op == CollectiveOp::all_reduce ? row.bytes : row.bytes / row.group_size;
        const std::vector<std::int64_t> chunks(static_cast<std::size_t>(row.group_size), per_rank);
        const auto [alpha, beta] = fit.at(row.name);
        row.model_time_us = ring_envelope_us(op, chunks, alpha, beta);
      }
      if (wanted.count(t.cell_id()) && !file.has_collectives(t.cell_id()))
        mine.emplace_back(t.cell_id(), std::move(rows));
    }
    HARNESS_CHECK_MPI(MPI_Barrier(comm));
  }
  file.write_collectives(mine, backend);
  int written = static_cast<int>(mine.size());
  HARNESS_CHECK_MPI(MPI_Allreduce(&written, &report.tables, 1, MPI_INT, MPI_SUM, comm));
  return report;
}

}  // namespace moe
