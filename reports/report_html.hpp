// A run's report as one self-contained HTML page: the markdown report.md holds (the few
// constructs report_markdown writes: headings, paragraphs, pipe tables, images, bold and code)
// rendered as HTML, its charts inlined, so the page needs nothing beside it.
#pragma once

#include <map>
#include <string>

namespace tpusim::reports {

/// `md` (report_markdown's output) as an HTML page titled `title`; an image whose file name is a
/// key of `images` is replaced by that SVG, inline.
std::string report_html(const std::string& md, const std::map<std::string, std::string>& images,
                        const std::string& title);

}  // namespace tpusim::reports
