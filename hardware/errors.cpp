#include "hardware/errors.hpp"

#include <sstream>

namespace tpusim {
namespace {

std::string format(const std::string& context, const std::vector<Problem>& problems) {
  std::ostringstream out;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    if (i > 0) out << '\n';
    out << context << ": " << (p.path.empty() ? "(top level)" : p.path) << ": found " << p.found
        << ", expected " << p.expected;
  }
  return out.str();
}

}  // namespace

ConfigError::ConfigError(std::string context, std::vector<Problem> problems)
    : std::runtime_error(format(context, problems)),
      context_(std::move(context)),
      problems_(std::move(problems)) {}

ConfigError::ConfigError(std::string context, std::string path, std::string found, std::string expected)
    : ConfigError(std::move(context), {Problem{std::move(path), std::move(found), std::move(expected)}}) {}

}  // namespace tpusim
