// A resume names the keys whose values differ from the checkpoint's saved config.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "odc/train/config/config_diff.h"
#include "odc/train/config/config_schema.h"

using namespace odc;

TEST_CASE("config diff: changed keys with old and new values, per-job keys and unknown keys left out",
          "[train][checkpoint]") {
  Config saved(train::trainer_tunables());
  saved.apply_assignment("train.lr=1e-3");
  saved.apply_assignment("train.stop_at_step=10");
  saved.apply_assignment("data.seed=3");
  Config now(train::trainer_tunables());
  now.apply_assignment("train.lr=0.002");
  now.apply_assignment("train.stop_at_step=20");  // meant to change between jobs
  now.apply_assignment("data.seed=3");
  now.apply_assignment("train.weight_decay=0.5");
  std::vector<std::string> skipped;
  const auto changes = train::config_changes(saved.dump() + "retired_section:\n  old_key: 1\n", now, &skipped);
  REQUIRE(changes.size() == 2);
  CHECK(train::describe_changes(changes) ==
        fmt::format("train.lr 0.001 -> 0.002, train.weight_decay {} -> 0.5", changes[1].saved));
  CHECK(changes[1].saved != "0.5");
  CHECK(skipped == std::vector<std::string>{"retired_section.old_key"});
  // The same values written differently are no change.
  now.apply_assignment("train.lr=0.001");
  now.apply_assignment("train.weight_decay=" + changes[1].saved);
  CHECK(train::config_changes(saved.dump(), now).empty());
}
