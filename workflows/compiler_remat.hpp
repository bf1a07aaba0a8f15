// The compiler's own re-materialization: XLA's rematerialization pass runs with the device's
// memory as its limit, so a program whose peak is over HBM is rewritten to recompute values
// until it fits, and runs slower instead of failing. tpusim models it as the study's
// re-materialization policy raised one step at a time (none -> "save_dots": the matmuls' outputs
// kept, the cheap element-wise and normalization outputs recomputed -> full: each layer's input
// kept), each step the same study simulated again in a child process (SimGrid allows one
// simulation per process), until the step fits or no stronger policy is left.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hardware/json_fields.hpp"

namespace tpusim {
struct Study;
}

namespace tpusim::workflows {

/// The re-materialization policies in the order the compiler would reach them (remat_json's
/// values: false, "save_dots", true), those stronger than `policy` that it reaches: "save_dots"
/// at most unless it recomputes whole layers (core.compiler_remat_recomputes_layers).
std::vector<Json> stronger_remat_policies(const Json& policy, bool recomputes_layers);

/// How a study is run again as a child: its file and --set overrides, or (a study given as
/// JSON) a temporary file holding it.
struct RerunnableStudy {
  std::string file;
  std::vector<std::string> sets;
  /// A child's `run FILE --json --set ...` arguments, then `extra_sets` after the study's own.
  std::vector<std::string> run_args(const std::vector<std::string>& extra_sets = {}) const {
    std::vector<std::string> args = {"run", file, "--json"};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    for (const auto& s : extra_sets) args.insert(args.end(), {"--set", s});
    return args;
  }
};

/// The compiler's answer for a step over HBM (`naive`: its result, fits false): the first
/// stronger policy whose step fits, its result with "compiler_remat" saying what it cost
/// (`out`, when not empty: the child writes its files there); or, when none fits, `naive` with
/// "compiler_remat" saying so. Nothing when the study's state alone (weights, optimizer slots)
/// is over HBM, which no recompute reduces, or when the study asks for the naive answer.
std::optional<Json> compiler_rematerialized(const Study& study, const RerunnableStudy& rerun,
                                            const Json& naive, const std::string& out, bool trace);

}  // namespace tpusim::workflows
