// Reports of `tpusim validate` (the tpusim.validation/1 JSON): a terminal table, validation.md
// and a self-contained validation.html with one parity plot per quantity (predicted against
// measured, log-log, the diagonal with a +-10 % band, each case's own tolerance in its tooltip).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tpusim::reports {

using Json = nlohmann::json;

/// A measured or predicted value in its unit, for people: "137.3 ms", "11.70 GiB", "103",
/// "12246 /s", "82.0M", "59.0 %", "1.210x".
std::string validation_value_text(double value, const std::string& unit);

/// Case / quantity / measured / predicted / error / tolerance table, the summary and the
/// assumed hardware figures.
std::string validation_text(const Json& report);
std::string validation_markdown(const Json& report);
std::string validation_html(const Json& report);

/// The parity plot of the cases of one quantity (log-log; null predictions are left out).
std::string parity_svg(const Json& report, const std::string& quantity);

}  // namespace tpusim::reports
