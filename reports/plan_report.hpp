// Reports of `tpusim plan` (schema tpusim.plan/1): the top plans, why the others lose, and a
// Pareto chart of throughput against peak HBM per core over every simulated plan.
#pragma once

#include <string>

#include "reports/run_report.hpp"

namespace tpusim::reports {

std::string plan_text(const Json& plan);
std::string plan_markdown(const Json& plan);
/// Self-contained HTML: the Pareto chart (inline SVG), the top plans and the rest with reasons.
std::string plan_html(const Json& plan);
/// The chart alone: one circle per simulated plan (filled: fits), the Pareto front of those that
/// fit as a line.
std::string pareto_svg(const Json& plan);

}  // namespace tpusim::reports
