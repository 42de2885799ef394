// The publisher: turns a complete acquisition file into per-TP bundles laid out as
// bundle/format.h says (docs/bundle-format.md).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/refinement.h"
#include "store/acquisition_file.h"

namespace moe {

class PublishError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PublishOptions {
  std::string out_root;  // empty: the job's out_root recorded in the file
  std::string variant;   // empty: the job's variant recorded in the file
  bool samples = false;  // also write samples.jsonl (one JSON object per timed forward)
  // Publish tables that miss the fidelity gate (points that failed B/2B after every re-measure,
  // held-out p95 above the tolerance); the entry records fidelity.status
  // "accepted-with-failures" with the numbers. Without it such tables are refused.
  bool accept_failures = false;
  // The launch waves the acquisition's backend declares (the caller knows the backends; empty:
  // none): the held-out errors of `experts` are then also split by them (held_out.by_waves).
  std::function<ExpertWaves(const StoredAcquisition&)> declared_waves;
};

struct PublishReport {
  std::string variant_dir;
  std::vector<std::string> published;  // target labels newly written
  std::vector<std::string> unchanged;  // already published with the same contract and table
  // Already published with the same contract and table, whose device anchors (rows measured again
  // on a device new to the campaign, after the table was published) were added to its coverage,
  // which held none of them (anchored) or held others, now replaced by the file's (reanchored).
  std::vector<std::string> anchored;
  std::vector<std::string> reanchored;
};

// Publishes every target of `h5_path`. Publishes nothing (PublishError naming every reason) when
// any target is incomplete or fails quality, or when a target is already published under a
// different contract or with a different table. Holds each target's writer.lock and the
// variant's .meta.lock while writing.
PublishReport publish(const std::string& h5_path, const PublishOptions& options);
// The same for a file already read (`h5_path` names it in messages and provenance).
PublishReport publish(const StoredAcquisition& acq, const std::string& h5_path,
                      const PublishOptions& options);

}  // namespace moe
