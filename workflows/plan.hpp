// `tpusim plan`: the fastest schedule that fits, for a study's model, batch, optimizer and
// slice. Every candidate of the space (plan_space.hpp) is validated and its task graph built
// in-process, which gives two exact bounds without the engine: the resident state each core
// holds all step (weights, optimizer slots, gradient accumulators; over capacity: pruned, it
// cannot fit) and the busiest core's compute time (no step is shorter). Candidates are then
// simulated in order of that bound, in fixed rounds, each in its own `tpusim run` process,
// until no unsimulated candidate's bound can beat the N-th best simulated plan that fits: the
// answer is the same as simulating every candidate, and always a simulated result.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tpusim::workflows {

struct PlanOptions {
  std::string study;
  std::vector<std::string> sets;
  std::string objective = "step_time_s";  ///< or "examples_per_s" (the same order at a fixed batch)
  int top = 5;
  std::string space;  ///< --space FILE ("" : the whole space)
  int jobs = 0;       ///< simulations at once (0: the machine's cores)
  bool json = false;
  std::string out;
  bool exhaustive = false;  ///< simulate every candidate that is valid and not pruned (tests)
  double point_timeout_s = 0;
  /// --time-limit: answer with the best plan found after this many seconds (0: none); the result
  /// then says it is incomplete and what was not examined. SIGINT and SIGTERM do the same.
  double time_limit_s = 0;
  /// How far the bounding of the candidates is (`done` of `total`), for a front end to show;
  /// called with `done` -1 once bounding ends. Empty: nothing is shown.
  std::function<void(int done, int total)> bounding_progress;
  /// Each line of the search's log (the candidates counted, each round, each simulation with the
  /// best so far and what may be left, each confirmation), for a front end to show; one call at a
  /// time. Empty: nothing is shown.
  std::function<void(const std::string& line)> search_log;
};

/// What a search found.
struct PlanOutcome {
  nlohmann::json plan;      ///< the tpusim.plan/1 JSON (`plan["best"]` null: no plan fits)
  std::string stop_reason;  ///< why the search stopped short ("" : it was complete)
  int signal = 0;           ///< SIGINT or SIGTERM that stopped it, or 0
  std::string closest;      ///< with no plan fitting: the candidate that overflowed least, and by how much
};

/// sweep --plan and fit --plan: each point (or probe) a `tpusim plan` search in a child.
struct PlanPerPoint {
  bool on = false;
  double time_limit_s = 0;  ///< > 0: each search answers with the best plan found after this long
  std::string space;        ///< a tpusim.plan_space/1 file narrowing every search
  /// ConfigError unless --plan-time-limit and --plan-space come with --plan, the time limit is in
  /// range and the space file reads.
  void check() const;
  /// The child's arguments before the point's own --set: plan STUDY --json -j JOBS, and the
  /// time limit and space when given.
  std::vector<std::string> arguments(const std::string& study, int jobs) const;
};

/// A plan child's answer (tpusim.plan/1) as a point's result: the best plan's run with its label
/// as "plan"; null when no plan fits.
nlohmann::json best_plan_run(const nlohmann::json& plan);

/// The search, and --out's files (plan.json, plan.md, plan.html, best.json) when `options.out`
/// is set; progress on stderr. Throws ConfigError for bad input. The CLI prints the result and
/// exits 0 (a plan fits), 1 (none does), or 128 + the signal that stopped the search.
PlanOutcome plan_study(const PlanOptions& options);

}  // namespace tpusim::workflows
