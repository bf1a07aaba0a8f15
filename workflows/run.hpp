// The library entry point of a run: load a study, build its step, simulate it and give the
// result JSON (what `tpusim run --json` prints), with --out's files written when asked. The CLI
// parses arguments and prints what this returns; the Python module calls the same function.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim::workflows {

/// The default budget of host memory for one simulation: half of this machine's memory, so a
/// sweep's two points or the rest of the machine still have room.
double half_of_physical_memory();

struct RunOptions {
  std::string study;  ///< the study file
  /// Instead of the file: the study itself (relative paths in it are the current directory's;
  /// not with `intervals`, whose children read a file).
  Json study_json;
  std::vector<std::string> sets;  ///< PATH=VALUE overrides, as --set
  std::string out;                ///< write result.json, report.md, ... here ("" : nothing)
  bool json = false;
  bool trace = false;        ///< with out: trace.json (the flows recorded)
  bool require_fit = false;  ///< a resident state over HBM answers without simulating the step
  bool no_symmetry = false;
  /// Collectives sharing links that may run at once, with no exact reduction: simulated on
  /// representative rings all the same, contention with the others left out
  /// (sim::EngineOptions::approximate_sharing). --intervals' children always ask for it.
  bool approximate_sharing = false;
  bool functional = false;
  int steps = 3;
  std::uint64_t seed = 1;
  double max_host_memory_bytes = half_of_physical_memory();
  bool intervals = false;
  int jobs = 0;
};

/// What a run gave.
struct RunOutcome {
  /// The result (tpusim.result JSON), or with require_fit and a resident state alone over HBM
  /// the small answer saying so ("simulated": false).
  Json result;
  bool simulated = true;
  bool fits = true;
};

/// Called as the simulation goes: tasks done, tasks in all, simulated seconds so far.
using RunProgressCallback = std::function<void(int done, int total, double simulated_s)>;

/// load -> build -> simulate -> result JSON (and --out's files when `o.out` is set). Throws
/// ConfigError (bad input), ResourceError (too large for this machine) or SimulationError.
RunOutcome run_study(const RunOptions& o, const RunProgressCallback& progress = {});

/// A one-line description of a valid study (what `tpusim check` prints after "FILE: ok ").
std::string check_study(const std::string& file, const std::vector<std::string>& sets);

}  // namespace tpusim::workflows
