// The slice's chips as a map of a perturbed run: each chip a cell on its torus coordinates
// (x across, y down; a 3D slice as one panel per z), shaded by how busy its busiest core was over
// the step; slow chips outlined with their speed, slow links marked on the edge they leave by
// (z links as a corner mark), failed links in black.
#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "reports/svg.hpp"

namespace tpusim::reports {

namespace {

struct ChipGrid {
  int nx = 1, ny = 1, nz = 1, panels_per_row = 1;
  double cell = 12, gap = 24, left = 20, top = 56;
  /// The top-left corner of chip (x, y, z)'s cell.
  std::pair<double, double> at(int x, int y, int z) const {
    const int px = z % panels_per_row, py = z / panels_per_row;
    return {left + px * (nx * cell + gap) + x * cell, top + py * (ny * cell + gap + 14) + y * cell};
  }
  double width() const { return std::max(640.0, left * 2 + panels_per_row * (nx * cell + gap)); }
  double height() const {
    const int rows = (nz + panels_per_row - 1) / panels_per_row;
    return top + rows * (ny * cell + gap + 14) + 30;
  }
};

ChipGrid grid_of(const std::vector<int>& shape) {
  ChipGrid g;
  g.nx = shape.size() > 0 ? shape[0] : 1;
  g.ny = shape.size() > 1 ? shape[1] : 1;
  g.nz = shape.size() > 2 ? shape[2] : 1;
  const int longest = std::max(g.nx, g.ny);
  g.cell = std::clamp(400.0 / longest, 6.0, 28.0);
  g.panels_per_row = std::max(1, std::min(g.nz, int(900 / (g.nx * g.cell + g.gap))));
  return g;
}

/// A chip's busy fraction: its busiest core's busy time over the step.
std::vector<double> chip_busy(const Json& result, int chips) {
  std::vector<double> busy(std::size_t(chips), 0.0);
  const double step = std::max(result["step_time_s"].get<double>(), 1e-30);
  for (const auto& c : result["cores"]) {
    const int chip = c["chip"].get<int>();
    if (chip >= 0 && chip < chips)
      busy[std::size_t(chip)] = std::max(busy[std::size_t(chip)], c["busy_s"].get<double>() / step);
  }
  return busy;
}

/// Light (idle) to dark blue (busy all step).
std::string shade(double fraction) {
  const double f = std::clamp(fraction, 0.0, 1.0);
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", int(235 - 180 * f), int(240 - 150 * f), int(250 - 60 * f));
  return buf;
}

int coordinate(const Json& chip, std::size_t d) { return d < chip.size() ? chip[d].get<int>() : 0; }

void slow_links(std::ostringstream& s, const ChipGrid& g, const Json& links) {
  for (const auto& l : links) {
    const auto [x0, y0] = g.at(coordinate(l["chip"], 0), coordinate(l["chip"], 1), coordinate(l["chip"], 2));
    const std::string dim = l["dimension"].get<std::string>();
    const bool plus = l["direction"] == "+";
    const char* colour = l["bandwidth_scale"].get<double>() == 0 ? "#000000" : "#e15759";
    const double c = g.cell;
    double xa = x0, ya = y0, xb = x0, yb = y0;
    if (dim == "x") {
      xa = xb = plus ? x0 + c : x0;
      yb = y0 + c;
    } else if (dim == "y") {
      ya = yb = plus ? y0 + c : y0;
      xb = x0 + c;
    } else {  // z (or beyond): a corner mark
      xa = plus ? x0 + c * 0.6 : x0;
      xb = xa + c * 0.4;
      ya = yb = plus ? y0 + c * 0.2 : y0 + c * 0.8;
    }
    s << "<line x1=\"" << svg_number(xa) << "\" y1=\"" << svg_number(ya) << "\" x2=\"" << svg_number(xb)
      << "\" y2=\"" << svg_number(yb) << "\" stroke=\"" << colour << "\" stroke-width=\"3\"><title>link "
      << xml_escape(l["chip"].dump()) << " " << dim << l["direction"].get<std::string>() << " at "
      << svg_number(l["bandwidth_scale"].get<double>()) << "</title></line>\n";
  }
}

}  // namespace

std::string chips_svg(const Json& result) {
  std::vector<int> shape = result["slice"]["chips"].get<std::vector<int>>();
  const ChipGrid g = grid_of(shape);
  const int chips = g.nx * g.ny * g.nz;
  const auto busy = chip_busy(result, chips);
  std::map<std::vector<int>, std::string> slow;  // chip -> its speed, as the tooltip says it
  for (const auto& c : result["perturbations"]["slow_chips"])
    slow[c["chip"].get<std::vector<int>>()] =
        ", speed " + svg_number(c["compute_scale"].get<double>()) +
        (c.contains("hbm_bandwidth_scale") ? ", HBM " + svg_number(c["hbm_bandwidth_scale"].get<double>())
                                           : "");
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg_number(g.width()) << "\" height=\""
    << svg_number(g.height()) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<text x=\"" << svg_number(g.left)
    << "\" y=\"18\" font-size=\"13\">Chips: each one's busy share of the step "
    << "(darker: busier)</text>\n<text x=\"" << svg_number(g.left)
    << "\" y=\"34\">slow chips outlined red; slow links red, failed links black, on the edge they leave by "
       "(z links: a corner mark)</text>\n";
  for (int z = 0; z < g.nz; ++z) {
    const auto [px, py] = g.at(0, 0, z);
    if (g.nz > 1)
      s << "<text x=\"" << svg_number(px) << "\" y=\"" << svg_number(py - 6) << "\">z = " << z << "</text>\n";
    for (int y = 0; y < g.ny; ++y)
      for (int x = 0; x < g.nx; ++x) {
        const int rank = x + g.nx * (y + g.ny * z);
        const auto [cx, cy] = g.at(x, y, z);
        std::vector<int> coords = {x, y};
        if (shape.size() > 2) coords.push_back(z);
        const auto it = slow.find(coords);
        s << "<rect x=\"" << svg_number(cx) << "\" y=\"" << svg_number(cy) << "\" width=\""
          << svg_number(g.cell) << "\" height=\"" << svg_number(g.cell) << "\" fill=\""
          << shade(busy[std::size_t(rank)]) << "\" stroke=\""
          << (it != slow.end() ? "#e15759\" stroke-width=\"2.5" : "#ffffff\" stroke-width=\"0.5")
          << "\"><title>chip " << xml_escape(Json(coords).dump()) << ": busy "
          << svg_number(100 * busy[std::size_t(rank)]) << " %"
          << (it != slow.end() ? it->second : std::string()) << "</title></rect>\n";
      }
  }
  slow_links(s, g, result["perturbations"]["slow_links"]);
  s << "</svg>\n";
  return s.str();
}

}  // namespace tpusim::reports
