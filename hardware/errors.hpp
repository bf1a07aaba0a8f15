// Typed errors of the whole library. Library code throws these; only cli/main turns them
// into exit codes (ConfigError -> 2, ResourceError -> 2, SimulationError -> 1).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tpusim {

/// One thing wrong with an input: where (a dotted JSON path such as `slice.chips[1]`),
/// what was found there (JSON text, or "missing") and what was expected instead.
struct Problem {
  std::string path;
  std::string found;
  std::string expected;
};

/// Bad input: every problem found in one validation pass, each with its JSON path.
class ConfigError : public std::runtime_error {
 public:
  /// `context` names the input (a file path or "study"); it prefixes every line of what().
  ConfigError(std::string context, std::vector<Problem> problems);
  /// Convenience for a single problem.
  ConfigError(std::string context, std::string path, std::string found, std::string expected);

  const std::string& context() const { return context_; }
  const std::vector<Problem>& problems() const { return problems_; }

 private:
  std::string context_;
  std::vector<Problem> problems_;
};

/// The simulation could not be carried out (deadlock, broken invariant, engine failure).
class SimulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A valid input too large to simulate on this machine (host memory, SimGrid's actor stacks):
/// refused up front with the estimate, before the process would die or swap.
class ResourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tpusim
