#include "workflows/plan.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <map>
#include <mutex>

#include "reports/plan_report.hpp"
#include "reports/run_report.hpp"
#include "schedules/step_builder.hpp"
#include "schedules/study.hpp"
#include "workflows/child_process.hpp"
#include "workflows/compiler_remat.hpp"
#include "workflows/interrupt.hpp"
#include "workflows/output_file.hpp"
#include "workflows/plan_space.hpp"

namespace fs = std::filesystem;

namespace tpusim::workflows {

namespace {

constexpr std::size_t kRound = 8;  // candidates simulated per round, whatever -j is: determinism
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Candidate {
  Json schedule;
  /// The model's attention ("" as the study has it, or "standard" / "flash": plan searches flash
  /// attention where the model has it).
  std::string attention;
  int variant = 0;  ///< which of the study's model variants it runs (ModelVariant)
  std::string label;
  std::string invalid;                 ///< why the study is invalid with this schedule
  double resident_bytes = 0;           ///< the most any core holds all step
  sim::MemoryBreakdown resident_by{};  ///< that core's resident state per memory category
  /// No core's peak is lower than this on the busiest core: its resident state plus what its
  /// program must hold at once besides (TaskGraph::memory_floors).
  double floor_bytes = 0;
  double bound_s = 0;  ///< no step is shorter: the longest chain of work, or the busiest core's
  int cores_used = 0;
  bool pruned = false;  ///< resident state over capacity
  /// Interleaved, and not bounded: its plain twin does not fit (bound_from_twin).
  bool pruned_by_twin = false;
  bool bounded = false;  ///< examined: validated and bounded (false when the search stopped first)
  bool simulated = false;
  Json result;        ///< the simulated result (null until simulated, or on failure)
  std::string error;  ///< the simulation failed
  bool fits() const { return result.is_object() && result.value("fits", false); }
  /// Simulated with --approximate-sharing's approximation (engine.approximate): confirmed by an
  /// exact run before it may stand among the top.
  bool approximate() const {
    return result.is_object() && result.contains("engine") && result.at("engine").value("approximate", false);
  }
  double step_s() const { return result.at("step_time_s").get<double>(); }
  /// The TPUs' own step: shorter than step_s when the step waits for the hosts' input.
  double tpu_step_s() const {
    const Json* in = result.contains("input") ? &result.at("input") : nullptr;
    return in && in->contains("tpu_step_time_s") ? in->at("tpu_step_time_s").get<double>() : step_s();
  }
};

/// Whether a memory floor is over the usable HBM: no run of it fits (with room for the floor being
/// summed in another order than the run's peak).
bool floor_over(double floor_bytes, double usable) { return floor_bytes > usable * (1 + 1e-9); }

/// The first line of an error's message (a ConfigError's first problem, with its context).
std::string first_problem(const std::string& what) { return what.substr(0, what.find('\n')); }

/// When to stop the search: a signal, or the time limit. Bounding gets at most half of the limit,
/// so that some of it is left to simulate the most promising candidates.
class Stopper {
 public:
  explicit Stopper(double limit_s) : limit_s_(limit_s), start_(Clock::now()) {}
  /// Whether to stop now; once true, stays true.
  bool requested() {
    if (stopped_) return true;
    if (const int sig = stop_signal()) return stop(sig == SIGINT ? "SIGINT" : "SIGTERM");
    // The time limit waits for one simulation to finish: a tight limit still gets an answer.
    if (limit_s_ > 0 && answered_ && elapsed_s() >= limit_s_)
      return stop("the time limit of " + seconds(limit_s_));
    return false;
  }
  /// A simulation finished: from now on the time limit may stop the search.
  void answered() { answered_ = true; }
  /// A candidate was bounded that can be simulated (valid, not pruned): the time limit may now
  /// cut bounding short.
  void simulable() { simulable_ = true; }
  /// Whether bounding should give way to simulating (half the time limit gone, or stopped). The
  /// limit waits for one simulable candidate, as it waits for one simulation: a tight one answers.
  bool bounding_over() {
    if (requested()) return true;
    if (limit_s_ <= 0 || !simulable_ || elapsed_s() < limit_s_ / 2) return false;
    bounding_cut_ = true;
    return true;
  }
  /// Whether the search left something out: stopped, or bounding cut short by the time limit
  /// (the search may then end before the limit, with candidates never bounded).
  bool cut_short() const { return stopped_ || bounding_cut_; }
  /// Why it was cut short.
  std::string reason() const {
    return stopped_ ? why_ : "the time limit of " + seconds(limit_s_) + " (half of it given to bounding)";
  }
  double elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  bool stopped() const { return stopped_; }
  const std::string& why() const { return why_; }
  /// When the stop was first seen (seconds since the search began).
  double stopped_at_s() const { return stopped_at_s_; }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", s);
    return buf;
  }
  bool stop(const std::string& why) {
    const std::lock_guard<std::mutex> guard(lock_);
    if (!stopped_) {
      why_ = why;
      stopped_at_s_ = elapsed_s();
    }
    stopped_ = true;
    return true;
  }
  double limit_s_;
  Clock::time_point start_;
  std::atomic<bool> stopped_{false}, answered_{false}, bounding_cut_{false}, simulable_{false};
  std::mutex lock_;
  std::string why_;
  double stopped_at_s_ = 0;
};

/// The study's model as given (attention "" : no change), or with its attention set.
struct ModelVariant {
  std::string attention;
  Study study;
  std::shared_ptr<LayerCostCache> costs;
};

/// The model variants plan searches: flash attention beside the study's own where the model
/// kind has it (a transformer without attention dropout) and the space allows it; the study's
/// own model alone otherwise.
std::vector<ModelVariant> model_variants(const Json& base, const std::string& file, const Study& study,
                                         const PlanSpace& space) {
  std::vector<ModelVariant> out;
  const std::string own = base.contains("model") && base["model"].is_object()
                              ? base["model"].value("attention", std::string("standard"))
                              : std::string("standard");
  for (const std::string attention : {"standard", "flash"}) {
    if (space.attention &&
        std::find(space.attention->begin(), space.attention->end(), attention) == space.attention->end())
      continue;
    if (attention == own) {
      out.push_back({"", study, nullptr});
      continue;
    }
    Json j = base;
    j["model"]["attention"] = attention;
    try {
      out.push_back({attention, parse_study(j, file, fs::path(file).parent_path()), nullptr});
    } catch (const ConfigError&) {  // the model has no such attention: not a variant
    }
  }
  if (out.empty()) out.push_back({"", study, nullptr});  // the space excluded the study's own
  return out;
}

/// Validates the study with `c.schedule` and bounds it (no engine: Schedule::bound). The
/// candidates share `costs` (they differ only in their schedule).
void bound(const Study& base, Candidate& c, double usable, const std::shared_ptr<LayerCostCache>& costs) {
  try {
    Study s = with_schedule(base, c.schedule);
    s.layer_costs = costs;
    const StepBound b = s.schedule->bound(s);
    c.bound_s = b.seconds;
    c.cores_used = b.cores_used;
    c.resident_bytes = b.resident_bytes;
    c.resident_by = b.resident_by;
    c.floor_bytes = b.floor_bytes;
    c.pruned = floor_over(c.floor_bytes, usable);
    c.bounded = true;
  } catch (const ConfigError& e) {
    c.invalid = first_problem(e.what());
    c.bounded = true;
  } catch (const std::exception& e) {
    c.invalid = e.what();
    c.bounded = true;
  }
}

/// `exact`: without --approximate-sharing (the search's runs take it: a candidate whose
/// collectives share links at once takes seconds instead of minutes; the top is re-run exactly).
void simulate(const PlanOptions& o, Candidate& c, Stopper& stop, bool exact = false) {
  std::vector<std::string> args = {"run", o.study, "--json"};
  if (!exact) args.push_back("--approximate-sharing");
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  if (!c.attention.empty()) args.insert(args.end(), {"--set", "model.attention=\"" + c.attention + "\""});
  args.insert(args.end(), {"--set", "schedule=" + c.schedule.dump()});
  c.simulated = true;
  try {
    const ChildResult child = run_self(args, o.point_timeout_s, [&] { return stop.requested(); });
    if (child.cancelled || (child.exit_code != 0 && stop.requested())) {  // stopped first: not examined
      c.simulated = false;
      return;
    }
    stop.answered();
    if (child.exit_code == 0)
      c.result = Json::parse(child.out);
    else
      c.error = first_problem(child.err.empty() ? "exit code " + std::to_string(child.exit_code) : child.err);
  } catch (const std::exception& e) {
    c.error = std::string("could not run: ") + e.what();
  }
}

/// Better plan first: shorter step, then shorter TPU step (plans that wait for the same hosts),
/// then fewer cores, then by name (a total order).
bool better(const Candidate* a, const Candidate* b) {
  if (a->step_s() != b->step_s()) return a->step_s() < b->step_s();
  if (a->tpu_step_s() != b->tpu_step_s()) return a->tpu_step_s() < b->tpu_step_s();
  if (a->cores_used != b->cores_used) return a->cores_used < b->cores_used;
  return a->label < b->label;
}

std::vector<const Candidate*> ranked_fitting(const std::vector<Candidate>& all) {
  std::vector<const Candidate*> fit;
  for (const auto& c : all)
    if (c.fits()) fit.push_back(&c);
  std::sort(fit.begin(), fit.end(), better);
  return fit;
}

/// The candidates to simulate, by ascending bound.
std::vector<Candidate*> simulation_order(std::vector<Candidate>& all) {
  std::vector<Candidate*> order;
  for (auto& c : all)
    if (c.bounded && c.invalid.empty() && !c.pruned) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](const Candidate* a, const Candidate* b) {
    return a->bound_s != b->bound_s ? a->bound_s < b->bound_s : a->label < b->label;
  });
  return order;
}

/// The step time a candidate's bound must beat to matter: the top-N'th plan's (infinite until N fit).
double top_threshold(const PlanOptions& o, const std::vector<Candidate>& all) {
  const auto fit = ranked_fitting(all);
  return !o.exhaustive && fit.size() >= std::size_t(o.top) ? fit[std::size_t(o.top) - 1]->step_s() : kInf;
}

/// A line of the search's log as each simulation finishes: how many so far, the best so far, and what may
/// be left (the candidates whose bound could still beat the top) with an estimate of its time.
class SearchProgress {
 public:
  SearchProgress(const PlanOptions& o, std::vector<Candidate>& all, const std::vector<Candidate*>& order)
      : o_(o), all_(all), order_(order), start_(std::chrono::steady_clock::now()) {}
  void finished(const Candidate& c) {
    const std::lock_guard<std::mutex> guard(lock_);
    ++done_;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const auto fit = ranked_fitting(all_);
    const double threshold = top_threshold(o_, all_);
    std::size_t left = 0;
    for (const Candidate* k : order_) left += !k->simulated && k->bound_s <= threshold ? 1 : 0;
    std::string line =
        "tpusim plan: simulated " + std::to_string(done_) + " (" + c.label + ": " +
        (c.result.is_object() ? reports::human_seconds(c.step_s()) + (c.fits() ? "" : ", does not fit")
                              : std::string("failed")) +
        ")";
    line += fit.empty()
                ? "; no fitting plan yet"
                : "; best so far " + fit.front()->label + " " + reports::human_seconds(fit.front()->step_s());
    const double each = elapsed / double(done_) / double(std::max(1, job_count(o_.jobs)));
    char eta[64];
    std::snprintf(eta, sizeof eta, "about %.0f s", each * double(left));
    line += "; " + std::to_string(left) + " more could still beat the top" +
            (left > 0 && threshold < kInf ? std::string(", ") + eta : std::string());
    if (o_.search_log) o_.search_log(line);
  }

 private:
  const PlanOptions& o_;
  std::vector<Candidate>& all_;
  const std::vector<Candidate*>& order_;
  std::chrono::steady_clock::time_point start_;
  std::mutex lock_;
  int done_ = 0;
};

/// Simulates in rounds by ascending bound until no bound can beat the top-N threshold, or until
/// asked to stop.
void search(const PlanOptions& o, std::vector<Candidate>& all, Stopper& stop) {
  const std::vector<Candidate*> order = simulation_order(all);
  SearchProgress progress(o, all, order);
  const int jobs = job_count(o.jobs);
  std::size_t next = 0, round = 0;
  while (next < order.size() && !stop.requested()) {
    const double threshold = top_threshold(o, all);
    std::vector<Candidate*> batch;
    while (next < order.size() && batch.size() < kRound && order[next]->bound_s <= threshold)
      batch.push_back(order[next++]);
    if (batch.empty()) break;
    if (o.search_log)
      o.search_log("tpusim plan: round " + std::to_string(++round) + ": simulating " +
                   std::to_string(batch.size()) + " (bounds " +
                   reports::human_seconds(batch.front()->bound_s) + " .. " +
                   reports::human_seconds(batch.back()->bound_s) + ")");
    parallel_for(batch.size(), jobs, [&](std::size_t k) {
      if (stop.requested()) return;
      simulate(o, *batch[k], stop);
      if (batch[k]->simulated) progress.finished(*batch[k]);
    });
  }
}

/// The top plans all simulated exactly: an approximate one among them is run again without the
/// approximation (its result replaced), and the ranking taken anew, until none is left.
void confirm_top(const PlanOptions& o, std::vector<Candidate>& all, Stopper& stop) {
  for (;;) {
    const auto fit = ranked_fitting(all);
    const std::size_t top = std::min(fit.size(), std::size_t(std::max(o.top, 1)));
    const auto first =
        std::find_if(fit.begin(), fit.begin() + top, [](const Candidate* c) { return c->approximate(); });
    if (first == fit.begin() + top || stop.requested()) return;
    Candidate& again = all[std::size_t(*first - all.data())];
    if (o.search_log) o.search_log("tpusim plan: confirming " + again.label + " without the approximation");
    simulate(o, again, stop, true);
  }
}

/// Why a candidate is not among the top: a sentence.
std::string why(const Candidate& c, const Candidate* best, double threshold) {
  if (!c.bounded) return "not examined: the search stopped before bounding it";
  if (!c.invalid.empty()) return "invalid: " + c.invalid;
  if (c.pruned_by_twin)
    return "not bounded: its uninterleaved twin does not fit (at least " +
           reports::human_bytes(c.floor_bytes) +
           " on a core), and interleaving keeps the same weights and more micro-batches in flight";
  if (c.pruned && c.resident_bytes >= c.floor_bytes)
    return "does not fit: resident state alone " + reports::human_bytes(c.resident_bytes) + " per core (" +
           reports::categories_text(c.resident_by) + ")";
  if (c.pruned)
    return "does not fit: at least " + reports::human_bytes(c.floor_bytes) + " on a core (resident " +
           reports::human_bytes(c.resident_bytes) + ": " + reports::categories_text(c.resident_by) +
           "; what its program holds at once besides, at least " +
           reports::human_bytes(c.floor_bytes - c.resident_bytes) + ")";
  if (!c.error.empty()) return "simulation failed: " + c.error;
  if (!c.simulated && c.bound_s <= threshold)
    return "not simulated: the search stopped before it (its longest chain of dependent work, at least " +
           reports::human_seconds(c.bound_s) + ", could still beat the top)";
  if (!c.simulated)
    return "slower: its longest chain of dependent work takes at least " + reports::human_seconds(c.bound_s) +
           ", more than " + reports::human_seconds(threshold) + " (the last of the top plans)";
  if (!c.fits()) {
    const Json& r = c.result;
    const Json& at = r["cores"][r["peak_hbm_core"].get<int>()]["hbm_at_peak"];
    std::string largest;
    double most = -1;
    for (auto it = at.begin(); it != at.end(); ++it)
      if (it.value().get<double>() > most) most = it.value().get<double>(), largest = it.key();
    return "does not fit: peak " + reports::human_bytes(r["peak_hbm_bytes"].get<double>()) + " of " +
           reports::human_bytes(r["hbm_capacity_bytes"].get<double>()) + " (largest: " + largest + " " +
           reports::human_bytes(most) + ")";
  }
  if (c.step_s() == best->step_s() && c.tpu_step_s() < c.step_s()) {
    // Both wait for the same hosts: as fast, but the TPUs' own step is longer.
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * (c.tpu_step_s() / best->tpu_step_s() - 1));
    return "as fast: both wait for the hosts' input (" + reports::human_seconds(c.step_s()) +
           "); its TPUs' own step " + reports::human_seconds(c.tpu_step_s()) + " is " + buf + " longer";
  }
  // Slower: by how much, and the phase of the step that grew most against the best.
  const Json& a = c.result["breakdown"]["step_split_s"];
  const Json& b = best->result["breakdown"]["step_split_s"];
  std::string phase;
  double grew = -kInf;
  for (auto it = a.begin(); it != a.end(); ++it) {
    const double d = it.value().get<double>() - b.value(it.key(), 0.0);
    if (d > grew) grew = d, phase = it.key();
  }
  if (phase == "idle") phase = "idle (pipeline bubble)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * (c.step_s() / best->step_s() - 1));
  return std::string("slower by ") + buf + " (most of it " + phase + ": +" + reports::human_seconds(grew) +
         ")";
}

Json summary(const Candidate& c) {
  Json j{{"plan", c.label}, {"schedule", c.schedule}, {"cores_used", c.cores_used}, {"bound_s", c.bound_s}};
  // No peak of its schedule is lower (the compiler's re-materialization may fit it below).
  if (c.bounded && c.invalid.empty()) j["floor_hbm_bytes"] = c.floor_bytes;
  if (!c.attention.empty()) j["attention"] = c.attention;
  if (c.result.is_object()) {
    for (const char* k : {"step_time_s", "examples_per_s", "peak_hbm_bytes", "mxu_utilization", "fits"})
      j[k] = c.result.value(k, Json(nullptr));
    // A study with a training target: each plan's days (and cost, with a price) to it.
    for (const char* k : {"time_to_train", "cost"})
      if (c.result.contains(k)) j[k] = c.result[k];
    if (c.approximate()) j["approximate"] = true;  // contention between collectives left out
    // Fitted by the compiler's re-materialization: the mixed program's peak, not the every-layer run's.
    if (const Json& r = c.result.value("compiler_remat", Json()); r.is_object() && r.value("fits", false)) {
      j["compiler_remat"] = {{"policy", r["policy"]},
                             {"share_of_layers_needed", r["share_of_layers_needed"]}};
      j["peak_hbm_bytes"] = r["peak_hbm_bytes"];
    }
  }
  return j;
}

/// What a device may hold (the same for every candidate), from any simulated one; null if none ran.
Json hbm_capacity(const std::vector<Candidate>& all) {
  for (const auto& c : all)
    if (c.result.is_object() && c.result.contains("hbm_capacity_bytes"))
      return c.result["hbm_capacity_bytes"];
  return nullptr;
}

Json plan_json(const PlanOptions& o, const std::vector<Candidate>& all) {
  const auto fit = ranked_fitting(all);
  const std::size_t top = std::min<std::size_t>(std::size_t(o.top), fit.size());
  const double threshold = top > 0 ? fit[top - 1]->step_s() : kInf;
  Json j{{"schema", "tpusim.plan/1"}, {"study", o.study},     {"objective", o.objective},
         {"best", nullptr},           {"top", Json::array()}, {"others", Json::array()},
         {"evaluated", all.size()}};
  std::size_t simulated = 0, pruned = 0, invalid = 0;
  std::size_t by_twin = 0;
  for (const auto& c : all) {
    simulated += c.simulated;
    pruned += c.pruned;
    by_twin += c.pruned_by_twin;
    invalid += !c.invalid.empty();
  }
  j["simulated"] = simulated;
  if (const Json capacity = hbm_capacity(all); !capacity.is_null()) j["hbm_capacity_bytes"] = capacity;
  j["pruned"] = {{"memory", pruned}, {"invalid", invalid}, {"interleaved_by_twin", by_twin}};
  if (top > 0) {
    j["best"] = {{"plan", fit[0]->label}, {"schedule", fit[0]->schedule}, {"result", fit[0]->result}};
    if (!fit[0]->attention.empty()) j["best"]["attention"] = fit[0]->attention;
  }
  for (std::size_t i = 0; i < top; ++i) j["top"].push_back(summary(*fit[i]));
  // The rest, closest first: simulated and fitting (by step time), simulated and not fitting
  // (by overflow), not simulated (by bound), pruned (by resident state), failed, invalid.
  std::vector<std::pair<std::pair<int, double>, const Candidate*>> rest;
  for (const auto& c : all) {
    if (std::find(fit.begin(), fit.begin() + std::ptrdiff_t(top), &c) != fit.begin() + std::ptrdiff_t(top))
      continue;
    std::pair<int, double> key{5, 0};
    if (!c.bounded)
      key = {6, 0};
    else if (!c.invalid.empty())
      key = {5, 0};
    else if (c.pruned)
      key = {3, c.floor_bytes};
    else if (!c.error.empty())
      key = {4, 0};
    else if (!c.simulated)
      key = {2, c.bound_s};
    else if (c.fits())
      key = {0, c.step_s()};
    else
      key = {1, c.result["peak_hbm_bytes"].get<double>()};
    rest.push_back({key, &c});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    // Plans that fit and wait for the same hosts: the shorter TPU step first.
    return a.first.first == 0 && a.second->tpu_step_s() < b.second->tpu_step_s();
  });
  for (const auto& [key, c] : rest) {
    Json s = summary(*c);
    s["why"] = why(*c, top > 0 ? fit[0] : nullptr, threshold);
    j["others"].push_back(std::move(s));
  }
  return j;
}

/// The study of the best plan, runnable from anywhere: a hardware file named by a path
/// relative to the study is made absolute.
Json runnable_study(Json study, const std::string& file, const Json& best, const std::string& label) {
  study["schedule"] = best["schedule"];
  if (best.contains("attention")) study["model"]["attention"] = best["attention"];
  study["description"] = "tpusim plan's best plan (" + label + ") for " + file + ". " +
                         study.value("description", std::string());
  if (study.contains("hardware") && study["hardware"].is_string()) {
    const fs::path hw = fs::path(file).parent_path() / study["hardware"].get<std::string>();
    if (fs::is_regular_file(hw)) study["hardware"] = fs::absolute(hw).lexically_normal().string();
  }
  return study;
}

/// With nothing fitting: the candidate that overflowed least, and by how much.
/// With no plan fitting: what a space could still ask for that might fit (meshes keeping each
/// layer's input split over the model axis, searched only when asked), or "".
std::string not_searched_hint(const Study& study, const PlanSpace& space) {
  PlanSpace more = space;
  if (!space.layer_input_split) more.layer_input_split = std::vector<bool>{true};
  if (!space.offload) more.offload = std::vector<bool>{false, true};
  const auto extra = plan_candidates(study, more);
  auto any = [&](const char* key) {
    return std::any_of(extra.begin(), extra.end(), [&](const Json& c) { return c.contains(key); });
  };
  std::string hint;
  if (!space.layer_input_split && any("layer_input_split"))
    hint =
        "meshes keeping each layer's input split over the model axis (a --space with \"layer_input_split\": "
        "[false, true])";
  if (!space.offload && any("offload"))
    hint += (hint.empty() ? "" : "; ") + std::string(
                                             "each layer's input offloaded to host memory (a --space with "
                                             "\"offload\": [false, true])");
  return hint.empty() ? "" : "; not searched: " + hint;
}

std::string closest(const std::vector<Candidate>& all, double usable) {
  const Candidate* best = nullptr;
  double over = kInf;
  for (const auto& c : all) {
    double o = kInf;
    if (c.result.is_object())
      o = c.result["peak_hbm_bytes"].get<double>() - c.result["hbm_capacity_bytes"].get<double>();
    if (o < over) over = o, best = &c;
  }
  if (best) return best->label + ", over by " + reports::human_bytes(over) + " per core";
  // None simulated (every one pruned by memory, say): the smallest memory floor of its bound.
  for (const auto& c : all)
    if (c.bounded && c.invalid.empty() && c.floor_bytes - usable < over)
      over = c.floor_bytes - usable, best = &c;
  if (!best) return "no candidate could be simulated";
  return best->label + ", whose memory floor (not simulated) is over by " + reports::human_bytes(over) +
         " per core";
}

/// Whether the search examined everything that could change its answer, and if not what it left:
/// candidates never bounded, and bounded ones whose bound could still beat the top but were not
/// simulated.
void record_completeness(const PlanOptions& o, const std::vector<Candidate>& all, const Stopper& stop,
                         Json& plan) {
  const double threshold = top_threshold(o, all);
  std::size_t unbounded = 0, unsimulated = 0;
  for (const auto& c : all) {
    if (!c.bounded)
      ++unbounded;
    else if (c.invalid.empty() && !c.pruned && !c.simulated && c.bound_s <= threshold)
      ++unsimulated;
  }
  const bool complete = unbounded == 0 && unsimulated == 0;
  plan["complete"] = complete;
  plan["stopped"] =
      stop.cut_short() ? Json{{"by", stop.reason()}, {"after_s", stop.elapsed_s()}} : Json(nullptr);
  plan["not_examined"] = {{"unbounded", unbounded}, {"unsimulated", unsimulated}};
}

}  // namespace

namespace {

void check_plan_options(const PlanOptions& o) {
  if (o.objective != "step_time_s" && o.objective != "examples_per_s" && o.objective != "time_to_train")
    throw ConfigError("--objective", "", o.objective, "step_time_s, examples_per_s or time_to_train");
  if (o.top < 1) throw ConfigError("--top", "", std::to_string(o.top), "a number of plans >= 1");
  if (o.jobs < 0) throw ConfigError("-j", "", std::to_string(o.jobs), "a number of simulations at once >= 1");
  check_timeout("--point-timeout", o.point_timeout_s);
}

/// Every candidate of the space, for the model as the study has it and with flash attention
/// where the model kind has it (each variant its own study and layer costs).
std::vector<Candidate> all_candidates(const PlanOptions& o, const std::vector<ModelVariant>& variants,
                                      const PlanSpace& space) {
  std::vector<Candidate> all;
  for (std::size_t v = 0; v < variants.size(); ++v)
    for (auto& s : plan_candidates(variants[v].study, space)) {
      Candidate c;
      // A variant's attention, when it is not the study's own, is named (" flash" beside a standard
      // study's, " standard" beside a flash study's): each label reads back into its candidate.
      c.label = plan_label(s) + (variants[v].attention.empty() ? "" : " " + variants[v].attention);
      c.schedule = std::move(s);
      c.attention = variants[v].attention;
      c.variant = int(v);
      all.push_back(std::move(c));
    }
  if (all.empty())
    throw ConfigError(o.space.empty() ? "plan" : o.space, "", "no candidate",
                      "a space leaving at least one schedule to try for this study");
  return all;
}

/// A candidate's schedule with its interleaving and partition left out, and its model variant.
std::string twin_key(const Candidate& c) {
  Json plain = c.schedule;
  plain.erase("virtual_stages");
  plain.erase("partition");
  return std::to_string(c.variant) + plain.dump();
}

/// The plain (uninterleaved) candidates bounded so far, by twin_key: the twins interleaved ones
/// are bounded from.
std::map<std::string, std::size_t> index_twins(const std::vector<Candidate>& all) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!all[i].schedule.contains("virtual_stages") && all[i].bounded) index.emplace(twin_key(all[i]), i);
  return index;
}

/// An interleaved candidate whose plain twin is invalid or over HBM takes its verdict, unbounded:
/// interleaving holds the same weights on a stage and keeps more micro-batches in flight (the
/// warm-up is longer), so a twin over HBM says it is very likely over too. A heuristic, said so
/// (pruned_by_twin): its chunks spread the layers over the stages differently, and a twin cut for
/// memory may differ from its cost-balanced cut. False when it must be bounded itself.
bool bound_from_twin(std::vector<Candidate>& all, std::size_t i,
                     const std::map<std::string, std::size_t>& twins) {
  Candidate& c = all[i];
  if (!c.schedule.contains("virtual_stages")) return false;
  const auto it = twins.find(twin_key(c));
  if (it == twins.end()) return false;
  const Candidate& twin = all[it->second];
  if (twin.invalid.empty() && !twin.pruned) return false;
  c.invalid = twin.invalid;
  c.pruned = twin.pruned;
  c.pruned_by_twin = twin.pruned;
  c.resident_bytes = twin.resident_bytes;
  c.resident_by = twin.resident_by;
  c.floor_bytes = twin.floor_bytes;
  c.cores_used = twin.cores_used;
  c.bounded = true;
  return true;
}

/// The floor of candidate `c`'s schedule under re-materialization `policy`: the bound of the
/// space's candidate with that schedule (`by_schedule`), or the schedule bounded now.
double floor_under(const Candidate& c, const Json& policy, const ModelVariant& v,
                   const std::map<std::pair<int, std::string>, const Candidate*>& by_schedule) {
  Json schedule = c.schedule;
  schedule["remat"] = policy;
  if (const auto it = by_schedule.find({c.variant, schedule.dump()}); it != by_schedule.end())
    return it->second->floor_bytes;
  Study s = with_schedule(v.study, schedule);
  s.layer_costs = v.costs;
  return s.schedule->bound(s).floor_bytes;
}

/// The candidates of `which` over HBM at their floor that the compiler's re-materialization may
/// still fit, as `run` answers them (compiler_rematerialized): kept for simulation (their run is
/// the compiler's mixed program, so plan and run agree) when the floor of a stronger policy the
/// compiler reaches fits.
void keep_what_the_compiler_fits(std::vector<Candidate>& all, const std::vector<std::size_t>& which,
                                 const std::vector<ModelVariant>& variants, double usable, int jobs,
                                 Stopper& stop) {
  std::map<std::pair<int, std::string>, const Candidate*> by_schedule;
  for (const auto& c : all)
    if (c.bounded && c.invalid.empty()) by_schedule[{c.variant, c.schedule.dump()}] = &c;
  parallel_for(which.size(), jobs, [&](std::size_t k) {
    Candidate& c = all[which[k]];
    const ModelVariant& v = variants[std::size_t(c.variant)];
    if (!c.pruned || c.pruned_by_twin || c.resident_bytes > usable || !v.study.compiler_remat) return;
    try {
      const Json remat = with_schedule(v.study, c.schedule).schedule->resolved().value("remat", Json());
      for (const Json& policy :
           stronger_remat_policies(remat, v.study.hardware.core.compiler_remat_recomputes_layers))
        if (!floor_over(floor_under(c, policy, v, by_schedule), usable)) {
          c.pruned = false;
          stop.simulable();
          return;
        }
    } catch (const ConfigError&) {  // the stronger policy is invalid here: nothing reaches it
    }
  });
}

/// Each candidate's graph built on its own (-j at a time) and bounded; results stay in
/// candidate order.
void bound_all(const PlanOptions& o, std::vector<ModelVariant>& variants, std::vector<Candidate>& all,
               double usable, Stopper& stop) {
  if (o.bounding_progress) o.bounding_progress(0, int(all.size()));
  {
    std::mutex lock;
    int done = 0;
    for (auto& v : variants) v.costs = std::make_shared<LayerCostCache>();
    // Interleaved pipelines after the plain ones: one whose plain twin is invalid or over HBM is
    // too (the same resident state, and at least as many activations in flight), unbuilt.
    std::vector<std::size_t> plain, interleaved;
    for (std::size_t i = 0; i < all.size(); ++i)
      (all[i].schedule.contains("virtual_stages") ? interleaved : plain).push_back(i);
    std::map<std::string, std::size_t> twins;
    auto pass = [&](const std::vector<std::size_t>& which) {
      parallel_for(which.size(), job_count(o.jobs), [&](std::size_t k) {
        const std::size_t i = which[k];
        if (stop.bounding_over()) return;  // left unexamined: time to simulate what was bounded
        const ModelVariant& v = variants[std::size_t(all[i].variant)];
        if (!bound_from_twin(all, i, twins)) bound(v.study, all[i], usable, v.costs);
        if (all[i].invalid.empty() && !all[i].pruned) stop.simulable();
        const std::lock_guard<std::mutex> guard(lock);
        ++done;
        if (o.bounding_progress) o.bounding_progress(done, int(all.size()));
      });
    };
    pass(plain);
    keep_what_the_compiler_fits(all, plain, variants, usable, job_count(o.jobs), stop);
    twins = index_twins(all);
    pass(interleaved);
    keep_what_the_compiler_fits(all, interleaved, variants, usable, job_count(o.jobs), stop);
  }
  if (o.bounding_progress) o.bounding_progress(-1, int(all.size()));
  std::size_t bounded = 0;
  for (const auto& c : all) bounded += c.bounded ? 1 : 0;
  if (o.search_log)
    o.search_log(
        "tpusim plan: " + std::to_string(all.size()) + " candidates" +
        (bounded < all.size() ? " (" + std::to_string(bounded) + " bounded before the time ran short)" : ""));
}

/// --out: plan.json, plan.md, plan.html and (a plan fits) best.json.
void write_plan_outputs(const PlanOptions& o, const Json& base, const Json& plan) {
  write_output_file(fs::path(o.out) / "plan.json", plan.dump(2) + "\n");
  write_output_file(fs::path(o.out) / "plan.md", reports::plan_markdown(plan));
  write_output_file(fs::path(o.out) / "plan.html", reports::plan_html(plan));
  if (!plan["best"].is_null())
    write_output_file(
        fs::path(o.out) / "best.json",
        runnable_study(base, o.study, plan["best"], plan["best"]["plan"].get<std::string>()).dump(2) + "\n");
}

}  // namespace

PlanOutcome plan_study(const PlanOptions& o) {
  check_plan_options(o);
  Json base = read_json_file(o.study);
  for (const auto& s : o.sets) apply_override(base, s);
  const Study study = parse_study(base, o.study, fs::path(o.study).parent_path());  // bad input: exit 2
  if (o.objective == "time_to_train" && study.target.unit.empty())
    throw ConfigError("--objective", "", o.objective,
                      "a study with a target (--set 'target={\"tokens\": 1e12}') for time_to_train");
  const PlanSpace space = o.space.empty() ? PlanSpace{} : read_plan_space(o.space);
  if (!o.out.empty()) make_output_directory(o.out);  // an unusable --out is said before the search
  // From here an interrupt still writes what there is; while the inputs were read, SIGINT and
  // SIGTERM ended the process as usual (a read that blocks could not have seen the request).
  catch_stop_signals();

  std::vector<ModelVariant> variants = model_variants(base, o.study, study, space);
  std::vector<Candidate> all = all_candidates(o, variants, space);
  if (!(o.time_limit_s >= 0))
    throw ConfigError("--time-limit", "", std::to_string(o.time_limit_s), "seconds >= 0 (0: none)");
  Stopper stop(o.time_limit_s);
  bound_all(o, variants, all, study.hardware.core.usable_hbm_bytes(), stop);
  search(o, all, stop);
  confirm_top(o, all, stop);
  Json plan = plan_json(o, all);
  record_completeness(o, all, stop, plan);
  if (!o.out.empty()) write_plan_outputs(o, base, plan);
  PlanOutcome outcome;
  outcome.stop_reason = plan["complete"].get<bool>() ? std::string() : stop.reason();
  outcome.signal = stop_signal();
  if (plan["best"].is_null())
    outcome.closest = closest(all, study.hardware.core.usable_hbm_bytes()) + not_searched_hint(study, space);
  outcome.plan = std::move(plan);
  return outcome;
}

void PlanPerPoint::check() const {
  if (!on && time_limit_s != 0)
    throw ConfigError("--plan-time-limit", "", Json(time_limit_s).dump(), "--plan as well");
  if (!on && !space.empty()) throw ConfigError("--plan-space", "", space, "--plan as well");
  check_timeout("--plan-time-limit", time_limit_s);
  if (!space.empty()) read_plan_space(space);
}

std::vector<std::string> PlanPerPoint::arguments(const std::string& study, int jobs) const {
  std::vector<std::string> args = {"plan", study, "--json", "-j", std::to_string(jobs)};
  if (time_limit_s > 0) args.insert(args.end(), {"--time-limit", Json(time_limit_s).dump()});
  if (!space.empty()) args.insert(args.end(), {"--space", space});
  return args;
}

Json best_plan_run(const Json& plan) {
  if (plan.value("best", Json(nullptr)).is_null()) return nullptr;
  Json result = plan["best"]["result"];
  result["plan"] = plan["best"]["plan"];
  return result;
}

}  // namespace tpusim::workflows
