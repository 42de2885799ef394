#include "store/campaign.h"

#include <unistd.h>

#include <chrono>
#include <ctime>

#include "core/files.h"
#include "core/timestamp.h"

namespace moe {

namespace {

nlohmann::json counts_json(const RecordCounts& n) {
  return {{"samples", n.samples}, {"medians", n.medians}, {"checks", n.checks}};
}

RecordCounts counts_of(const nlohmann::json& j) {
  return {j.value("samples", std::int64_t{0}), j.value("medians", std::int64_t{0}),
          j.value("checks", std::int64_t{0})};
}

// The SHA-256 of the document without its digest.
std::string digest_of(nlohmann::json doc) {
  doc.erase("digest");
  return sha256_hex(doc.dump());
}

void save_document(const std::filesystem::path& path, nlohmann::json doc) {
  doc["digest"] = digest_of(doc);
  write_file_atomic(path, doc.dump(1));
}

double seconds_between(const std::string& from_utc, std::filesystem::file_time_type to) {
  const auto from = parse_utc(from_utc);
  if (!from) return 0;
  const auto to_sys =
      std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::file_clock::to_sys(to));
  return std::max(0.0, static_cast<double>(to_sys.time_since_epoch().count() - *from));
}

}  // namespace

nlohmann::json load_campaign_document(const std::filesystem::path& path) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + " is corrupt (" + e.what() +
                             "); it was left untouched");
  }
  if (!doc.is_object() || !doc.contains("digest"))
    throw std::runtime_error(path.string() +
                             " has no digest (an older harness wrote it, or it was replaced): the "
                             "budget and record accounting cannot be trusted; start a new "
                             "campaign in another --out");
  if (!doc["digest"].is_string() || doc["digest"].get<std::string>() != digest_of(doc))
    throw std::runtime_error(path.string() +
                             " was edited outside the harness (its digest does not match its "
                             "content): the budget and record accounting cannot be trusted; "
                             "restore it, or start a new campaign in another --out");
  return doc;
}

void charge_campaign(const std::filesystem::path& dir, const std::string& what,
                     double device_seconds) {
  const auto path = dir / kCampaignFile;
  nlohmann::json doc =
      std::filesystem::exists(path)
          ? load_campaign_document(path)
          : nlohmann::json{{"schema", "campaign/1"}, {"device_seconds_consumed", 0.0}};
  doc["device_seconds_consumed"] = doc.value("device_seconds_consumed", 0.0) + device_seconds;
  doc["charges"].push_back(
      {{"what", what}, {"device_seconds", device_seconds}, {"utc", utc_now()}});
  std::filesystem::create_directories(dir);
  save_document(path, doc);
}

void check_record_balance(const std::filesystem::path& dir, const RecordCounts& rows_in_file) {
  const auto state = dir / kCampaignFile;
  if (!std::filesystem::exists(state)) return;
  const auto doc = load_campaign_document(state);
  if (!doc.contains("records")) return;
  const auto& w = doc["records"]["written"];
  if (w.value("samples", std::int64_t{-1}) != rows_in_file.samples ||
      w.value("medians", std::int64_t{-1}) != rows_in_file.medians ||
      w.value("checks", std::int64_t{-1}) != rows_in_file.checks ||
      doc["records"].value("dropped", 0) != 0)
    throw std::runtime_error(
        "record counters in " + state.string() + " do not balance with the file (written " +
        w.dump() + ", file samples " + std::to_string(rows_in_file.samples) + ", medians " +
        std::to_string(rows_in_file.medians) + ", checks " + std::to_string(rows_in_file.checks) +
        ", dropped " + doc["records"]["dropped"].dump() + ")");
}

std::string executable_sha256() {
  try {
    return sha256_hex(read_file("/proc/self/exe"));
  } catch (const std::exception&) {
    return "unknown";
  }
}

CampaignState::CampaignState(const std::filesystem::path& dir, const std::string& command,
                             const std::string& job_text, const std::string& families,
                             double budget_seconds, bool raise_budget)
    : path_(dir / kCampaignFile), budget_(budget_seconds) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const nlohmann::json run = {{"command", command},
                              {"started_utc", utc_now()},
                              {"host", host},
                              {"harness_sha256", executable_sha256()}};
  if (std::filesystem::exists(path_)) doc_ = load_campaign_document(path_);
  if (doc_.contains("job_sha256")) {
    if (doc_.value("family_table_sha256", "") != families)
      throw std::runtime_error(
          "refusing to resume " + path_.string() +
          ": the operator-family table changed (family_table_sha256); use another --out");
    if (doc_.value("job_sha256", "") != sha256_hex(job_text))
      doc_["job_changes"].push_back(utc_now());
  } else {
    // A new campaign, or one that so far holds only charges (the co-location gate).
    doc_["schema"] = "campaign/1";
    doc_["job_sha256"] = sha256_hex(job_text);
    doc_["family_table_sha256"] = families;
    doc_["device_seconds_consumed"] = doc_.value("device_seconds_consumed", 0.0);
    doc_["records"] = {{"encoded", counts_json({})}, {"written", counts_json({})}, {"dropped", 0}};
    doc_["cell_rounds_done"] = 0;
    doc_["runs"] = nlohmann::json::array();
  }
  if (!doc_.contains("budget_seconds")) {
    doc_["budget_seconds"] = budget_;
  } else if (const double fixed = doc_["budget_seconds"].get<double>(); budget_ != fixed) {
    if (budget_ > fixed && !raise_budget)
      throw BudgetError("the campaign in " + path_.string() + " was started with a budget of " +
                        std::to_string(fixed / 3600) + " GPU-hours; " +
                        std::to_string(budget_ / 3600) +
                        " raises it: pass --raise-budget to do so (it is recorded)");
    doc_["budget_changes"].push_back({{"utc", utc_now()},
                                      {"from_seconds", fixed},
                                      {"to_seconds", budget_},
                                      {"command", command}});
    doc_["budget_seconds"] = budget_;
  }
  // A wave whose run was killed still held its devices until the run's last heartbeat.
  if (doc_.contains("reservation")) {
    const auto r = doc_["reservation"];
    const auto heartbeat = dir / kHeartbeatFile;
    const double held = std::filesystem::exists(heartbeat)
                            ? seconds_between(r.value("started_utc", ""),
                                              std::filesystem::last_write_time(heartbeat))
                            : 0.0;
    const double charged = held * r.value("devices", 1);
    doc_["device_seconds_consumed"] = consumed_seconds() + charged;
    auto wave = r;
    wave["held_seconds"] = held;
    wave["charged_device_seconds"] = charged;
    wave["charged_from"] = std::filesystem::exists(heartbeat)
                               ? "the interrupted run's last heartbeat"
                               : "nothing (no heartbeat file): 0 charged";
    doc_["interrupted_waves"].push_back(wave);
    interrupted_ =
        InterruptedWave{r.value("wave", ""), held, charged, std::filesystem::exists(heartbeat)};
    doc_.erase("reservation");
  }
  doc_["runs"].push_back(run);
  doc_["phase"] = "started";
  save();
}

void CampaignState::reserve(const std::string& wave, double estimate_seconds, int devices) {
  const double consumed = consumed_seconds();
  if (consumed + estimate_seconds > budget_) {
    doc_["phase"] = "stopped: budget";
    save();
    throw BudgetError(
        "budget: wave " + wave + " needs about " + std::to_string(estimate_seconds / 3600) +
        " GPU-hours, " + std::to_string(consumed / 3600) + " of " + std::to_string(budget_ / 3600) +
        " GPU-hours are used; stopping before it (everything measured so far is kept: raise "
        "budget.gpu_hours or --gpu-hours and run the same command again)");
  }
  doc_["phase"] = "measuring " + wave;
  doc_["reserved_seconds"] = estimate_seconds;
  doc_["reservation"] = {{"wave", wave},
                         {"estimate_device_seconds", estimate_seconds},
                         {"devices", devices},
                         {"started_utc", utc_now()}};
  save();
}

namespace {

// Adds the cell rounds of `rounds` (WaveRound objects as `pending_wave` holds them) to the
// document's cell-round count and measured costs.
void account_rounds(nlohmann::json& doc, const nlohmann::json& rounds) {
  auto& c = doc["cost"];
  if (!c.is_object()) c = nlohmann::json::object();
  for (const auto& r : rounds) {
    const std::string kind = r.value("experts", false) ? "expert" : "local";
    c[kind + "_seconds"] = c.value(kind + "_seconds", 0.0) + r.value("seconds", 0.0);
    c[kind + "_point_rounds"] =
        c.value(kind + "_point_rounds", std::int64_t{0}) + r.value("point_rounds", std::int64_t{0});
  }
  for (const char* kind : {"expert", "local"}) {  // present, if zero, once a wave is accounted
    const std::string k = kind;
    c[k + "_seconds"] = c.value(k + "_seconds", 0.0);
    c[k + "_point_rounds"] = c.value(k + "_point_rounds", std::int64_t{0});
  }
  doc["cell_rounds_done"] =
      doc.value("cell_rounds_done", std::int64_t{0}) + static_cast<std::int64_t>(rounds.size());
}

}  // namespace

void CampaignState::encoded(const RecordCounts& rows, const std::vector<WaveRound>& rounds) {
  auto e = counts_of(doc_["records"]["encoded"]);
  e += rows;
  doc_["records"]["encoded"] = counts_json(e);
  auto pending = nlohmann::json::array();
  for (const auto& r : rounds)
    pending.push_back({{"cell", r.cell},
                       {"round", r.round},
                       {"experts", r.experts},
                       {"seconds", r.seconds},
                       {"point_rounds", r.point_rounds}});
  doc_["pending_wave"] = {{"rows", counts_json(rows)}, {"rounds", pending}};
  save();
}

void CampaignState::committed(double wall_seconds, int devices) {
  const auto pending = doc_.value("pending_wave", nlohmann::json::object());
  auto w = counts_of(doc_["records"]["written"]);
  w += counts_of(pending.value("rows", nlohmann::json::object()));
  doc_["records"]["written"] = counts_json(w);
  account_rounds(doc_, pending.value("rounds", nlohmann::json::array()));
  doc_.erase("pending_wave");
  doc_.erase("reservation");
  charge(wall_seconds, devices);
}

void CampaignState::charge(double wall_seconds, int devices) {
  doc_["device_seconds_consumed"] = consumed_seconds() + wall_seconds * devices;
  doc_["updated_utc"] = utc_now();
  save();
}

void CampaignState::record_cost_ratios(const std::map<std::string, double>& ratios) {
  auto& stored = doc_["cost_ratios"];
  if (!stored.is_object()) stored = nlohmann::json::object();
  for (const auto& [kind, ratio] : ratios) stored[kind] = ratio;
  save();
}

namespace {

// The positive ratios under `cost_ratios` (the harness writes only those; another is ignored, so
// its kind is calibrated again).
std::map<std::string, double> cost_ratios_in(const nlohmann::json& doc) {
  std::map<std::string, double> out;
  if (const auto it = doc.find("cost_ratios"); it != doc.end() && it->is_object())
    for (const auto& [kind, ratio] : it->items())
      if (ratio.is_number() && ratio.get<double>() > 0) out[kind] = ratio.get<double>();
  return out;
}

}  // namespace

std::map<std::string, double> CampaignState::cost_ratios() const {
  return cost_ratios_in(doc_);
}

std::optional<CampaignProgress> read_campaign_progress(const std::filesystem::path& dir) {
  const auto path = dir / kCampaignFile;
  if (!std::filesystem::exists(path)) return std::nullopt;
  try {
    const auto doc = load_campaign_document(path);
    const auto c = doc.value("cost", nlohmann::json::object());
    CampaignProgress p;
    p.expert_point_rounds = c.value("expert_point_rounds", std::int64_t{0});
    p.local_point_rounds = c.value("local_point_rounds", std::int64_t{0});
    p.device_seconds_consumed = doc.value("device_seconds_consumed", 0.0);
    p.phase = doc.value("phase", std::string());
    p.cost_ratios = cost_ratios_in(doc);
    if (p.expert_point_rounds > 0 || p.local_point_rounds > 0) {
      MeasuredCost m;
      if (p.expert_point_rounds > 0)
        m.expert_point_round_s = c.value("expert_seconds", 0.0) / p.expert_point_rounds;
      if (p.local_point_rounds > 0)
        m.local_point_round_s = c.value("local_seconds", 0.0) / p.local_point_rounds;
      m.source = "campaign.json of " + dir.string() + ", " +
                 std::to_string(p.expert_point_rounds + p.local_point_rounds) + " point-rounds";
      p.measured = m;
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + " is malformed (" + e.what() + ")");
  }
}

void CampaignState::set_phase(const std::string& phase) {
  doc_["phase"] = phase;
  save();
}

void CampaignState::set_outcome(const std::string& outcome, const std::string& reason) {
  auto& run = doc_["runs"].back();
  run["outcome"] = outcome;
  run["ended_utc"] = utc_now();
  if (!reason.empty()) run["reason"] = reason;
  save();
}

void CampaignState::dropped(std::int64_t n) {
  if (n == 0) return;
  doc_["records"]["dropped"] = doc_["records"].value("dropped", std::int64_t{0}) + n;
  save();
}

namespace {

// The last commit stopped somewhere between "encoded" and "written": the rounds whose flags were
// set (all, none, or some ranks' before a kill) are written; the rest was lost in flight and is
// measured again. Rows outside that range are not explained.
std::optional<std::string> unexplained(const nlohmann::json& records, const RecordCounts& in_file,
                                       const std::string& state) {
  const auto enc = counts_of(records.value("encoded", nlohmann::json::object())),
             wr = counts_of(records.value("written", nlohmann::json::object()));
  const auto between = [](const RecordCounts& lo, const RecordCounts& x, const RecordCounts& hi) {
    return lo.samples <= x.samples && x.samples <= hi.samples && lo.medians <= x.medians &&
           x.medians <= hi.medians && lo.checks <= x.checks && x.checks <= hi.checks;
  };
  if (between(wr, in_file, enc)) return std::nullopt;
  return "record counters do not balance: the file holds " + counts_json(in_file).dump() +
         " rows in complete rounds, " + state + " accounts for " + counts_json(wr).dump() +
         " written and " + counts_json(enc).dump() + " encoded";
}

}  // namespace

std::optional<std::string> unexplained_rows(const std::filesystem::path& dir,
                                            const RecordCounts& rows_in_file) {
  const auto state = dir / kCampaignFile;
  if (!std::filesystem::exists(state)) return std::nullopt;
  const auto doc = load_campaign_document(state);
  return unexplained(doc.value("records", nlohmann::json::object()), rows_in_file, state.string());
}

void CampaignState::record_restore(const std::string& problem, const std::string& damaged_copy) {
  doc_["restored_from_snapshot"].push_back(
      {{"utc", utc_now()}, {"problem", problem}, {"damaged_copy", damaged_copy}});
  save();
}

void CampaignState::reconcile(
    const RecordCounts& in_file,
    const std::function<bool(const std::string& cell, int round)>& round_complete) {
  auto& records = doc_["records"];
  const auto enc = counts_of(records.value("encoded", nlohmann::json::object())),
             wr = counts_of(records.value("written", nlohmann::json::object()));
  if (in_file != wr || enc != wr) {
    if (const auto why = unexplained(records, in_file, path_.string()))
      throw std::runtime_error(*why);
    auto lost = counts_of(records.value("lost_in_flight", nlohmann::json::object()));
    lost +=
        {enc.samples - in_file.samples, enc.medians - in_file.medians, enc.checks - in_file.checks};
    records["lost_in_flight"] = counts_json(lost);
    records["written"] = counts_json(in_file);
    records["encoded"] = counts_json(in_file);
  }
  if (const auto it = doc_.find("pending_wave"); it != doc_.end()) {
    auto complete = nlohmann::json::array();
    const auto rounds = it->value("rounds", nlohmann::json::array());
    for (const auto& r : rounds)
      if (round_complete(r.value("cell", std::string()), r.value("round", -1)))
        complete.push_back(r);
    account_rounds(doc_, complete);
    doc_["recovered_waves"].push_back({{"utc", utc_now()},
                                       {"cell_rounds_pending", rounds.size()},
                                       {"cell_rounds_complete_in_file", complete.size()}});
    doc_.erase("pending_wave");
  }
  save();
}

void CampaignState::save() const {
  save_document(path_, doc_);
}

}  // namespace moe
