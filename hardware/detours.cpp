#include "hardware/detours.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>

namespace tpusim {

namespace {

struct LinkEdge {
  int link = -1;
};
using ChipGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, LinkEdge>;

/// The chips as vertices and the links that have not failed as edges, in link id order.
ChipGraph working_links(const Topology& t, const std::vector<bool>& failed) {
  ChipGraph g(std::size_t(t.chips()));
  for (int link = 0; link < t.link_id_bound(); ++link) {
    const int from = t.link_source(link);
    const LinkDirection d = t.link_direction(link);
    if (t.link_exists(from, d) && !failed[std::size_t(link)])
      boost::add_edge(std::size_t(from), std::size_t(t.link_target(from, d)), LinkEdge{link}, g);
  }
  return g;
}

/// Records, for each chip a breadth-first search reaches, the link it was reached by.
template <class Graph>
struct ArrivalRecorder : boost::default_bfs_visitor {
  std::vector<int>* arrival;
  explicit ArrivalRecorder(std::vector<int>& a) : arrival(&a) {}
  template <class Edge>
  void tree_edge(Edge e, const Graph& g) const {
    (*arrival)[boost::target(e, g)] = g[e].link;
  }
};

/// Whether `start` reaches every vertex of `g`; `missed` gets those it does not.
template <class Graph>
void unreached(const Graph& g, std::size_t start, std::vector<int>& missed) {
  std::vector<int> arrival(boost::num_vertices(g), -1);
  boost::breadth_first_search(g, start, boost::visitor(ArrivalRecorder<Graph>(arrival)));
  for (std::size_t v = 0; v < arrival.size(); ++v)
    if (v != start && arrival[v] < 0) missed.push_back(int(v));
}

}  // namespace

struct Detours::WorkingLinks {
  ChipGraph graph;
};

Detours::Detours(const Topology& topology, const NetworkState& network) : topology_(topology) {
  failed_.assign(std::size_t(topology.link_id_bound()), false);
  for (int link = 0; link < topology.link_id_bound(); ++link)
    if (network.link_scale(link) == 0.0) {
      failed_[std::size_t(link)] = true;
      ++failed_count_;
    }
  if (any()) working_ = std::make_shared<const WorkingLinks>(WorkingLinks{working_links(topology, failed_)});
}

std::vector<int> Detours::route(int from, int to, bool* detoured, bool* reachable) const {
  if (detoured) *detoured = false;
  if (reachable) *reachable = true;
  std::vector<int> direct = topology_.route(from, to);
  if (std::none_of(direct.begin(), direct.end(), [&](int l) { return failed_[std::size_t(l)]; }))
    return direct;
  const ChipGraph& g = working_->graph;
  std::vector<int> arrival(std::size_t(topology_.chips()), -1);
  boost::breadth_first_search(g, std::size_t(from), boost::visitor(ArrivalRecorder<ChipGraph>(arrival)));
  if (arrival[std::size_t(to)] < 0) {
    if (reachable) *reachable = false;
    return {};
  }
  std::vector<int> path;
  for (int at = to; at != from; at = topology_.link_source(path.back()))
    path.push_back(arrival[std::size_t(at)]);
  std::reverse(path.begin(), path.end());
  if (detoured) *detoured = true;
  return path;
}

std::vector<int> Detours::cut_off() const {
  std::vector<int> missed;
  if (!any()) return missed;
  const ChipGraph& g = working_->graph;
  unreached(g, 0, missed);
  unreached(boost::make_reverse_graph(g), 0, missed);
  std::sort(missed.begin(), missed.end());
  missed.erase(std::unique(missed.begin(), missed.end()), missed.end());
  if (missed.empty() || 2 * missed.size() <= std::size_t(topology_.chips())) return missed;
  std::vector<int> rest;  // the smaller side: chip 0 and those it still reaches both ways
  for (int chip = 0; chip < topology_.chips(); ++chip)
    if (!std::binary_search(missed.begin(), missed.end(), chip)) rest.push_back(chip);
  return rest;
}

}  // namespace tpusim
