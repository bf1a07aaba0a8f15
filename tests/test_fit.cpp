// The fit search on fake probes: boundaries, bounds, non-monotonic answers, invalid values; the
// compiler re-materialization's ladder of policies.
#include <catch2/catch.hpp>

#include "workflows/compiler_remat.hpp"
#include "workflows/fit.hpp"

using namespace tpusim::workflows;

namespace {
std::function<Probe(double)> threshold(double largest_fitting, int* calls = nullptr) {
  return [=](double v) {
    if (calls) ++*calls;
    Probe p;
    p.value = v;
    p.fits = v <= largest_fitting;
    return p;
  };
}
}  // namespace

TEST_CASE("bisection between min and max finds the boundary", "[fit]") {
  FitSearch s;
  s.min = 1;
  s.max = 4096;
  int calls = 0;
  const auto out = fit_search(s, threshold(1663, &calls));
  REQUIRE(out.max_fitting);
  CHECK(*out.max_fitting == 1663);
  CHECK(out.monotonic);
  CHECK(calls <= 20);
}

TEST_CASE("upward search by doubling when no maximum is given", "[fit]") {
  FitSearch s;
  s.min = 8;
  s.start = 24;
  const auto out = fit_search(s, threshold(300));
  REQUIRE(out.max_fitting);
  CHECK(*out.max_fitting == 300);
}

TEST_CASE("the step sets the grid of answers", "[fit]") {
  FitSearch s;
  s.min = 16;
  s.max = 1024;
  s.step = 16;
  const auto out = fit_search(s, threshold(500));
  REQUIRE(out.max_fitting);
  CHECK(*out.max_fitting == 496);
}

TEST_CASE("nothing fits, or everything up to the maximum fits", "[fit]") {
  FitSearch s;
  s.min = 4;
  s.max = 64;
  CHECK_FALSE(fit_search(s, threshold(2)).max_fitting);
  CHECK(*fit_search(s, threshold(1000)).max_fitting == 64);
}

TEST_CASE("a non-monotonic fit is reported", "[fit]") {
  FitSearch s;
  s.min = 1;
  s.max = 100;
  // Fits up to 60 except a hole between 10 and 20: bisection finds 60, a check probe below
  // lands in the hole.
  auto probe = [](double v) {
    Probe p;
    p.value = v;
    p.fits = v <= 60 && !(v > 10 && v < 20);
    return p;
  };
  const auto out = fit_search(s, probe);
  CHECK(*out.max_fitting == 60);
  CHECK_FALSE(out.monotonic);
  // And a fitting island above the boundary.
  auto island = [](double v) {
    Probe p;
    p.value = v;
    p.fits = v <= 30 || (v >= 52 && v <= 58);  // the checks above land at 54, 77 and 100
    return p;
  };
  CHECK_FALSE(fit_search(s, island).monotonic);
}

TEST_CASE("a probe that errors counts as not fitting", "[fit]") {
  FitSearch s;
  s.min = 1;
  s.max = 16;
  auto probe = [](double v) {
    Probe p;
    p.value = v;
    p.fits = true;
    if (v > 5) p.error = "invalid";
    return p;
  };
  CHECK(*fit_search(s, probe).max_fitting == 5);
}

TEST_CASE("a probe that fails ends the search instead of counting as does-not-fit", "[fit]") {
  FitSearch s;
  s.min = 1;
  s.max = 64;
  int calls = 0;
  auto probe = [&](double v) {
    ++calls;
    if (v > 40) throw ProbeFailed("model.layers = " + std::to_string(int(v)) + ": killed by signal 9");
    Probe p;
    p.value = v;
    p.fits = v <= 20;
    return p;
  };
  // The first probes (min, then max = 64) reach the failing value: no answer, and the failure
  // propagates (tpusim fit turns it into exit code kFitProbeFailed, never into a smaller answer).
  CHECK_THROWS_AS(fit_search(s, probe), ProbeFailed);
  CHECK(calls == 2);
  CHECK(kFitProbeFailed != 0);
}

TEST_CASE("the compiler's re-materialization reaches whole layers only when its stack recomputes them",
          "[fit][compiler_remat]") {
  using tpusim::Json;
  const std::vector<Json> dots = {Json("save_dots")};
  const std::vector<Json> both = {Json("save_dots"), Json(true)};
  CHECK(stronger_remat_policies(Json(false), false) == dots);
  CHECK(stronger_remat_policies(Json(false), true) == both);
  CHECK(stronger_remat_policies(Json("save_dots"), false).empty());
  CHECK(stronger_remat_policies(Json("save_dots"), true) == std::vector<Json>{Json(true)});
  CHECK(stronger_remat_policies(Json(true), false).empty());
  CHECK(stronger_remat_policies(Json(true), true).empty());
}
