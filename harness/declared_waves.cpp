// The launch waves a stored acquisition's backend declares (harness/commands.h).
#include <nlohmann/json.hpp>

#include "bundle/hardware.h"
#include "core/contract.h"
#include "harness/commands.h"
#include "kernels/native_tile_rule.h"

namespace moe::cli {

ExpertWaves stored_expert_waves(const StoredAcquisition& acq) {
  Contract contract;
  try {
    contract = Contract::parse(acq.contract_json);
  } catch (const ContractError&) {
    return {};  // the command that reads the contract says what is wrong with it
  }
  return expert_launch_waves(contract.backend, contract.geometry, recorded_sm_count(acq));
}

}  // namespace moe::cli
