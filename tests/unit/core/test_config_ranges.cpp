// Config ranges: how a declared range reads, values outside it refused from every layer (naming
// the key, the bound, the value and the source), ranges in dump(), a default outside its own
// range refused at declaration.
#include "odc/core/config.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "unit/scoped_env.h"

using Catch::Contains;
using odc::Config;
using odc::TunableSpec;
using odc::ValueKind;
using odc::test::ScopedEnv;

namespace {

// A small schema with every kind of bound: >= 1, > 0, [0, 1), (0, 1], <= 64.
std::vector<TunableSpec> ranged_specs() {
  using odc::Range;
  return {
      odc::tunable("train.threads", ValueKind::integer, "1", "compute threads", Range::at_least(1)),
      odc::tunable("train.lr", ValueKind::number, "3e-4", "peak learning rate", Range::above(0)),
      odc::tunable("train.beta1", ValueKind::number, "0.9", "AdamW beta1", Range::at_least(0).and_below(1)),
      odc::tunable("sim.efficiency", ValueKind::number, "0.5", "fraction of peak", Range::above(0).and_at_most(1)),
      odc::tunable("sim.depth", ValueKind::integer, "1", "prefetch depth", Range::at_most(64)),
      odc::tunable("train.steps", ValueKind::integer, "100", "optimizer steps"),
  };
}

}  // namespace

TEST_CASE("ranges read as they are declared", "[config]") {
  using odc::Range;
  CHECK(Range::at_least(1).text() == ">= 1");
  CHECK(Range::above(0).text() == "> 0");
  CHECK(Range::at_most(64).text() == "<= 64");
  CHECK(Range::below(1).text() == "< 1");
  CHECK(Range::at_least(0).and_below(1).text() == "in [0, 1)");
  CHECK(Range::above(0).and_at_most(1).text() == "in (0, 1]");
  CHECK(Range::above(1e-3).and_below(65536).text() == "in (0.001, 65536)");
  CHECK(Range().text().empty());
  CHECK_FALSE(Range().bounded());
  // Each end exactly where it is declared: inclusive ends hold their bound, exclusive ones do not.
  CHECK(Range::at_least(0).and_below(1).contains(0.0));
  CHECK(Range::at_least(0).and_below(1).contains(0.9999999999999999));
  CHECK_FALSE(Range::at_least(0).and_below(1).contains(1.0));
  CHECK_FALSE(Range::at_least(0).and_below(1).contains(-1e-300));
  CHECK(Range::above(0).contains(1e-300));
  CHECK_FALSE(Range::above(0).contains(0.0));
  CHECK(Range::above(0).and_at_most(1).contains(1.0));
  CHECK(Range().contains(-1e300));
}

TEST_CASE("config ranges reject values outside them, naming the key, the bound, the value and the source",
          "[config]") {
  Config config(ranged_specs());
  REQUIRE_THROWS_WITH(config.apply_assignment("train.threads=0"),
                      Contains("config key 'train.threads' in --set must be >= 1, found 0"));
  REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  steps: 3\n  lr: -1e-3\n", "run.yaml"),
                      Contains("config key 'train.lr' in run.yaml:3 must be > 0, found -1e-3"));
  CHECK(config.get_int("train.steps") == 100);  // all or nothing: the file's valid key did not stick
  {
    const ScopedEnv beta("ODC_TRAIN_BETA1", "1");
    REQUIRE_THROWS_WITH(config.apply_environment(),
                        Contains("config key 'train.beta1' in environment ODC_TRAIN_BETA1 must be in [0, 1), found 1"));
  }
  REQUIRE_THROWS_WITH(config.apply_assignment("sim.efficiency=0"), Contains("must be in (0, 1], found 0"));
  REQUIRE_THROWS_WITH(config.apply_assignment("sim.depth=65"), Contains("'sim.depth'") && Contains("<= 64, found 65"));
  // An integer beyond 64 bits is out of range, not "not an integer" (it was: expects an integer).
  REQUIRE_THROWS_WITH(config.apply_assignment("train.steps=18446744073709551617"),
                      Contains("config key 'train.steps' in --set must be in [-9223372036854775808, "
                               "9223372036854775807] (a 64-bit integer), found 18446744073709551617"));
  REQUIRE_THROWS_WITH(config.apply_assignment("train.threads=-9223372036854775809"), Contains("(a 64-bit integer)"));
  // The type is checked first: a range never reads text that is not a number.
  REQUIRE_THROWS_WITH(config.apply_assignment("train.lr=fast"), Contains("expects a number, found 'fast'"));

  // Values on the bounds and inside are taken as they are.
  config.apply_assignment("train.threads=1");
  config.apply_assignment("train.lr=1e-300");
  config.apply_assignment("train.beta1=0");
  config.apply_assignment("sim.efficiency=1");
  config.apply_assignment("sim.depth=-5");
  config.apply_assignment("train.steps=-7");  // no range declared
  CHECK(config.get_int("train.threads") == 1);
  CHECK(config.get_double("train.lr") == 1e-300);
  CHECK(config.get_double("train.beta1") == 0.0);
  CHECK(config.get_double("sim.efficiency") == 1.0);
  CHECK(config.get_int("sim.depth") == -5);
  CHECK(config.get_int("train.steps") == -7);
}

TEST_CASE("config dump shows each range after the doc", "[config]") {
  Config config(ranged_specs());
  config.apply_assignment("train.threads=4");
  const std::string text = config.dump();
  CHECK_THAT(text, Contains("  threads: 4  # compute threads [>= 1] [from --set]\n"));
  CHECK_THAT(text, Contains("  lr: 3e-4  # peak learning rate [> 0]\n"));
  CHECK_THAT(text, Contains("  beta1: 0.9  # AdamW beta1 [in [0, 1)]\n"));
  CHECK_THAT(text, Contains("  steps: 100  # optimizer steps\n"));
  CHECK_THAT(config.dump(false), !Contains("[>= 1]"));
  Config reloaded(ranged_specs());
  reloaded.load_yaml_text(text, "dump.yaml");
  CHECK(reloaded.canonical() == config.canonical());
}

TEST_CASE("a default outside its own range is refused", "[config]") {
  using odc::Range;
  CHECK_THROWS_WITH(Config({odc::tunable("train.lr", ValueKind::number, "0", "lr", Range::above(0))}),
                    Contains("'train.lr' in default must be > 0, found 0"));
  CHECK_THROWS_WITH(Config({odc::tunable("train.comm", ValueKind::string, "odc", "comm", Range::above(0))}),
                    Contains("has a range but is not a number"));
}
