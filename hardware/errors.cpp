#include "hardware/errors.hpp"

#include <cstdio>
#include <sstream>

namespace tpusim {
namespace {

/// Control characters (a NUL in a key, a newline in a value) written as \u00XX: the message
/// stays one line per problem and is never cut short where it is printed as a C string.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
      continue;
    }
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\u%04x", unsigned(u));
    out += escaped;
  }
  return out;
}

/// At most this many problems are spelled out; the rest are counted.
constexpr std::size_t kProblemsShown = 50;

std::string format(const std::string& context, const std::vector<Problem>& problems) {
  std::ostringstream out;
  for (std::size_t i = 0; i < problems.size() && i < kProblemsShown; ++i) {
    const Problem& p = problems[i];
    if (i > 0) out << '\n';
    out << printable(context) << ": " << (p.path.empty() ? "(top level)" : printable(p.path)) << ": found "
        << printable(p.found) << ", expected " << printable(p.expected);
  }
  if (problems.size() > kProblemsShown)
    out << '\n' << printable(context) << ": and " << problems.size() - kProblemsShown << " more problems";
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
