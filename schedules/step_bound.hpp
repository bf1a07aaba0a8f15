// A step's bound without the engine, as plan ranks and prunes candidate schedules with it: every
// task at its floor (each ring step of a collective as long as its slowest member's flow alone:
// one link's bandwidth, every hop's latency, no contention), the longest chain of dependent work,
// and the memory no core's peak can be below. Schedule::bound's default reads a representative step's
// task graph; a mesh layout bounds its SPMD program instead (schedules/mesh_bound.cpp).
#pragma once

#include <vector>

#include "schedules/study.hpp"
#include "sim/collectives/collective_algorithm.hpp"

namespace tpusim {

/// The study's collectives as its hardware plans them.
sim::CollectivePlanner collective_planner(const Study& s);

/// No collective is faster: each ring step lasts as long as its slowest member's chunk takes
/// alone, over the on-chip link between cores of one chip or else at one ICI link's bandwidth
/// after every hop's latency of the shortest route (no contention; without `latency` the
/// bandwidth term alone, which adds up over collectives however they are combined).
/// `across_slices`: a weight-gradient reduction over the replicas that continues across the
/// slices (its data-center network phase included).
double collective_floor(const Study& s, const sim::CollectivePlanner& planner, sim::CollectiveOp op,
                        const std::vector<int>& group, double bytes, bool latency = true,
                        bool across_slices = false);

/// The bound of a built step: the critical path of its task graph with every task at its floor,
/// the busiest core's resident state and memory floor, the cores it uses (its represented
/// replicas counted).
StepBound graph_bound(const Study& s, const BuiltStep& step);

}  // namespace tpusim
