// Self-contained SVG charts of one simulated step: the timeline (a row per core, a box per
// task) and the per-core HBM peak as stacked bars against the capacity line.
#pragma once

#include <string>

#include "reports/run_report.hpp"

namespace tpusim::reports {

/// Timeline of the step: one row per core (at most `max_rows` cores that ran compute), boxes
/// coloured by phase (forward, backward, recompute, update) with micro-batch numbers, and a
/// lane under each row for the transfers and collectives the core takes part in; time axis.
std::string timeline_svg(const sim::TaskGraph& graph, const sim::SimResult& result, int max_rows = 64);

/// Peak HBM per core (at most `max_bars` cores, those with the highest peaks in core order) as
/// stacked bars of weights, optimizer, gradients, activations and workspace at the peak, with
/// the capacity as a line. Reads result.json.
std::string memory_svg(const Json& result, int max_bars = 64);

/// A perturbed run's chips on the slice's torus (result.json with "perturbations"): each chip's
/// busy share of the step, slow chips outlined, slow and failed links marked (reports/chips_svg.cpp).
std::string chips_svg(const Json& result);

/// Colour used for a task phase or memory category (shared with the HTML reports).
const char* phase_colour(const std::string& phase);

/// A coordinate for SVG output: two decimals, so output is compact and deterministic.
std::string svg_number(double v);

/// Text escaped for SVG/HTML content and attributes.
std::string xml_escape(const std::string& text);

/// The start of a self-contained report page: doctype, title, the shared style (tables, inline
/// SVG charts) plus `extra_css`, and the opening body tag.
std::string html_page_start(const std::string& title, const std::string& extra_css = "");

/// A round step (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `range`.
double tick_step(double range, int ticks);

}  // namespace tpusim::reports
