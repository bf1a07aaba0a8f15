// `tpusim sweep` and `tpusim merge`: every point of a grid run as its own `tpusim run` process
// (N at a time), results appended point by point to results.jsonl (the record) and
// results.csv as they finish, resumable after a crash, shardable over a batch system, and
// summarized in report.html / report.md.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "workflows/plan.hpp"

namespace tpusim::workflows {

struct SweepOptions {
  std::string study;
  std::vector<std::string> sets;   ///< --set applied to every point
  std::vector<std::string> grids;  ///< --grid PATH=values
  std::vector<std::string> zips;   ///< --zip PATH=values
  int jobs = 0;                    ///< 0: the number of cores
  std::string out;
  bool resume = false;
  std::string shard;  ///< "i/n", or empty (then SLURM_ARRAY_TASK_ID/COUNT if set)
  double point_timeout_s =
      0;  ///< > 0: a point still running after this long is killed and recorded as failed
  /// Re-plan each point: its result is `tpusim plan`'s best (its run, "plan" its label), its
  /// error "no plan fits" when none does.
  PlanPerPoint plan;
  /// Progress for a front end to show, one call at a time: `started` once with this shard's
  /// points and those of them already recorded (--resume), `point_done` as each point ends
  /// (`error` empty when it ran; `key` its values). Empty: nothing is shown.
  std::function<void(std::size_t points, std::size_t recorded)> started;
  std::function<void(const std::string& key, const std::string& error)> point_done;
};

/// What a sweep (or a merge) wrote.
struct SweepOutcome {
  std::string dir;                     ///< where: results.jsonl, results.csv, report.html, report.md
  std::vector<nlohmann::json> points;  ///< each point's summary, in point order (results.csv's rows)
  std::size_t failed = 0;              ///< points recorded as failed
  std::size_t points_in_sweep = 0;     ///< merge: the points of the whole sweep
};

/// Runs this shard's points, each in its own process (progress through the options), and writes the
/// outputs. Throws ConfigError for bad input. The CLI exits 0 when no point failed, 1 otherwise.
SweepOutcome sweep_study(const SweepOptions& options);

/// A sweep's points without running them (every point, shards ignored), each as a spec a worker
/// elsewhere can run with sweep_point_record: {"index", "key", "point": {path: value},
/// "settings": [[path, value], ...] in axis order}. Throws
/// ConfigError for bad input, as sweep_study does before it runs anything.
std::vector<nlohmann::json> sweep_point_specs(const SweepOptions& options);

/// One point's record, as results.jsonl holds it (index, key, point, result or error), run as a
/// `tpusim run` child of `options.study` with its --set and the point's settings; `cancel`, asked
/// a few times a second, kills the child when it answers true (the record then says so).
nlohmann::json sweep_point_record(const SweepOptions& options, const nlohmann::json& spec,
                                  const std::function<bool()>& cancel = {});

/// A record's summary (the point, its figures, its error): a row of results.csv.
nlohmann::json sweep_record_summary(const nlohmann::json& record);

/// Combines the results of shards (or partial runs) of one sweep into `out`.
SweepOutcome merge_sweeps(const std::vector<std::string>& dirs, const std::string& out);

}  // namespace tpusim::workflows
