#include "reports/report_html.hpp"

#include <sstream>
#include <vector>

#include "reports/svg.hpp"

namespace tpusim::reports {

namespace {

/// Escaped text with report_markdown's inline markup: **bold** and `code`.
std::string inline_html(const std::string& text) {
  const std::string escaped = xml_escape(text);
  std::string out;
  bool bold = false, code = false;
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (!code && escaped.compare(i, 2, "**") == 0) {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      ++i;
    } else if (escaped[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else {
      out += escaped[i];
    }
  }
  if (code) out += "</code>";
  if (bold) out += "</strong>";
  return out;
}

/// The cells of a pipe-table row "| a | b |".
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::size_t start = row.find('|') + 1;
  for (std::size_t bar; (bar = row.find('|', start)) != std::string::npos; start = bar + 1) {
    std::string cell = row.substr(start, bar - start);
    const auto first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
    out.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  return out;
}

/// Lines starting at `i` that form a table, as HTML; advances `i` past them.
std::string table_html(const std::vector<std::string>& lines, std::size_t& i) {
  std::ostringstream h;
  h << "<table>\n";
  bool header = true;
  for (; i < lines.size() && !lines[i].empty() && lines[i][0] == '|'; ++i) {
    if (lines[i].find("| ---") == 0 || lines[i].find("| ---:") == 0) continue;  // the separator row
    h << "<tr>";
    for (const auto& c : cells(lines[i]))
      h << (header ? "<th>" : "<td>") << inline_html(c) << (header ? "</th>" : "</td>");
    h << "</tr>\n";
    header = false;
  }
  h << "</table>\n";
  return h.str();
}

/// "![alt](file)": the SVG for `file`, inline, or an image element referring to it.
std::string image_html(const std::string& line, const std::map<std::string, std::string>& images) {
  const auto open = line.find("](");
  const std::string alt = line.substr(2, open - 2), file = line.substr(open + 2, line.size() - open - 3);
  auto it = images.find(file);
  if (it != images.end()) return "<figure>" + it->second + "</figure>\n";
  return "<img alt=\"" + xml_escape(alt) + "\" src=\"" + xml_escape(file) + "\">\n";
}

}  // namespace

std::string report_html(const std::string& md, const std::map<std::string, std::string>& images,
                        const std::string& title) {
  std::vector<std::string> lines;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::ostringstream h;
  h << html_page_start(title, "td:first-child,th:first-child{text-align:left}code{background:#f4f4f4}");
  for (std::size_t i = 0; i < lines.size();) {
    const std::string& line = lines[i];
    if (line.empty()) {
      ++i;
    } else if (line[0] == '|') {
      h << table_html(lines, i);
    } else if (line.rfind("## ", 0) == 0) {
      h << "<h2>" << inline_html(line.substr(3)) << "</h2>\n";
      ++i;
    } else if (line.rfind("# ", 0) == 0) {
      h << "<h1>" << inline_html(line.substr(2)) << "</h1>\n";
      ++i;
    } else if (line.rfind("![", 0) == 0 && line.back() == ')') {
      h << image_html(line, images);
      ++i;
    } else {  // a paragraph: up to the next blank line
      std::string text;
      for (; i < lines.size() && !lines[i].empty() && lines[i][0] != '|'; ++i)
        text += (text.empty() ? "" : " ") + lines[i];
      h << "<p>" << inline_html(text) << "</p>\n";
    }
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace tpusim::reports
