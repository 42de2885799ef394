#include "comm/collectives.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace moe {

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::all_to_all:
      return "all_to_all";
  }
  return "?";
}

double bus_factor(CollectiveOp op, int ranks) {
  if (ranks < 1) throw std::invalid_argument("a collective needs at least one rank");
  const double n = ranks;
  return op == CollectiveOp::all_reduce ? 2.0 * (n - 1) / n : (n - 1) / n;
}

Bandwidth bandwidth(CollectiveOp op, int ranks, std::int64_t total_bytes, double time_us) {
  const double algbw = static_cast<double>(total_bytes) / (time_us * 1e-6) / 1e9;
  return {algbw, algbw * bus_factor(op, ranks)};
}

double ring_envelope_us(CollectiveOp op, std::span<const std::int64_t> per_rank_bytes,
                        double alpha_us, double beta_bytes_per_us) {
  const auto n = static_cast<double>(per_rank_bytes.size());
  if (per_rank_bytes.size() < 2) return 0.0;
  const double steps = op == CollectiveOp::all_reduce ? 2 * (n - 1) : n - 1;
  double chunk =
      static_cast<double>(*std::max_element(per_rank_bytes.begin(), per_rank_bytes.end()));
  // AllReduce moves one n-th of each rank's buffer per step.
  if (op == CollectiveOp::all_reduce) chunk /= n;
  return steps * (alpha_us + chunk / beta_bytes_per_us);
}

double steady_state_us(Communicator& c, CollectiveOp op, std::int64_t total_bytes, int iterations) {
  if (iterations < 1) throw std::invalid_argument("steady state needs at least one op");
  c.run(op, total_bytes);
  c.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) c.launch(op, total_bytes);
  c.synchronize();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return c.average(us / iterations);
}

std::vector<int> group_members(const Target& t, const std::string& group) {
  const int dp_index = t.rank / t.tp, tp_index = t.rank % t.tp;
  std::vector<int> out;
  if (group == "tp") {
    for (int i = 0; i < t.tp; ++i) out.push_back(dp_index * t.tp + i);
  } else if (group == "ep") {
    for (int r = 0; r < t.ep; ++r) out.push_back(r);
  } else if (group == "gather") {
    if (t.sp) {
      for (int r = 0; r < t.ep; ++r) out.push_back(r);
    } else {
      for (int d = 0; d < t.dp; ++d) out.push_back(d * t.tp + tp_index);
    }
  } else {
    throw std::invalid_argument("unknown collective group '" + group + "'");
  }
  return out;
}

std::vector<CollectiveCase> collective_cases(const ModelGeometry& g, const Target& t,
                                             std::span<const std::int64_t> tokens) {
  const TokenDomains dom(t.tp, t.dp, t.sp);
  const std::int64_t act = 2;  // bf16 activations
  const int gather = static_cast<int>(group_members(t, "gather").size());
  std::vector<CollectiveCase> out;
  for (const auto n : tokens) {
    const std::int64_t local = dom.local_rows(n);
    if (t.dp > 1) {
      const std::int64_t rows = local * gather;  // gathered rows
      out.push_back({"allgather_hidden", CollectiveOp::all_gather, "gather", gather, n,
                     rows * g.hidden * act});
      out.push_back({"allgather_topk_weights", CollectiveOp::all_gather, "gather", gather, n,
                     rows * g.top_k * 4});
      out.push_back({"allgather_topk_ids", CollectiveOp::all_gather, "gather", gather, n,
                     rows * g.top_k * 4});
      out.push_back({"reducescatter", CollectiveOp::reduce_scatter, "gather", gather, n,
                     rows * g.hidden * act});
    }
    if (t.dp > 1) {
      // The EP exchange of a DP×EP step: every local row's k hidden-state copies go to their
      // experts' ranks (dispatch) and the expert outputs come back (combine).
      const std::int64_t bytes = local * g.top_k * g.hidden * act;
      out.push_back({"ep_dispatch", CollectiveOp::all_to_all, "ep", t.ep, n, bytes});
      out.push_back({"ep_combine", CollectiveOp::all_to_all, "ep", t.ep, n, bytes});
    }
    if (t.tp > 1) {
      if (t.sp)
        out.push_back({"tp_allgather", CollectiveOp::all_gather, "tp", t.tp, n,
                       local * t.tp * g.hidden * act});
      else
        out.push_back(
            {"tp_allreduce", CollectiveOp::all_reduce, "tp", t.tp, n, local * g.hidden * act});
    }
  }
  return out;
}

}  // namespace moe
