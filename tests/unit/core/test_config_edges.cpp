// Config edges (issue row 15): YAML that yaml-cpp reads but a config cannot mean -- a second
// document, which was dropped silently, and a merge key (<<), which was reported as a misspelt key.
#include <catch2/catch.hpp>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "unit/scoped_env.h"

#include <cstdlib>
#include <string>
#include <vector>

using Catch::Contains;
using odc::Config;
using odc::ValueKind;

namespace {

std::vector<odc::TunableSpec> specs() {
  return {odc::tunable("train.lr", ValueKind::number, "0.001", "learning rate"),
          odc::tunable("train.steps", ValueKind::integer, "10", "steps"),
          odc::tunable("model.config", ValueKind::map, "{hidden_size: 8}", "model shape")};
}

}  // namespace

TEST_CASE("config YAML: a second document is an error naming file:line", "[config]") {
  Config config(specs());
  REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  lr: 0.1\n---\ntrain:\n  steps: 5\n", "run.yaml"),
                      Contains("run.yaml:3") && Contains("a second YAML document"));
  CHECK(config.get_double("train.lr") == 0.001);  // nothing of the file was applied
  REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  lr: 0.1\n---\n", "empty_second.yaml"),
                      Contains("empty_second.yaml:3") && Contains("a second YAML document"));
  // A leading '---' (and a closing '...') mark the one document: accepted.
  config.load_yaml_text("---\ntrain:\n  lr: 0.2\n...\n", "one.yaml");
  CHECK(config.get_double("train.lr") == 0.2);
}

TEST_CASE("config YAML: a merge key (<<) is refused as such, anywhere", "[config]") {
  Config config(specs());
  const std::string text = "base: &b\n  lr: 0.1\ntrain:\n  <<: *b\n  steps: 3\n";
  REQUIRE_THROWS_WITH(config.load_yaml_text(text, "merge.yaml"),
                      Contains("merge.yaml:4") && Contains("YAML merge keys (<<) are not supported") &&
                          !Contains("did you mean"));
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config:\n    <<: {a: 1}\n", "inner.yaml"),
                      Contains("inner.yaml:3") && Contains("YAML merge keys (<<) are not supported"));
  // A quoted "<<" is an ordinary (here unknown) key.
  REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  \"<<\": 1\n", "quoted.yaml"),
                      Contains("unknown config key 'train.<<'"));
  // An alias for a whole value still works.
  config.load_yaml_text("model:\n  config: &m {hidden_size: 16}\n", "alias.yaml");
  CHECK(config.get_map("model.config")["hidden_size"].as<int>() == 16);
}

using odc::test::ScopedEnv;

TEST_CASE("config environment: unknown, lower-case and nested map variables are refused with the right name",
          "[config]") {
  Config config(specs());
  {
    const ScopedEnv lower("ODC_train_lr", "0.5");
    REQUIRE_THROWS_WITH(config.apply_environment(),
                        Contains("environment variable ODC_train_lr is not read") && Contains("'ODC_TRAIN_LR'"));
  }
  {
    const ScopedEnv nested("ODC_MODEL_CONFIG_HIDDEN_SIZE", "64");
    const ScopedEnv good("ODC_TRAIN_STEPS", "7");
    REQUIRE_THROWS_WITH(config.apply_environment(),
                        Contains("ODC_MODEL_CONFIG_HIDDEN_SIZE names no config key") &&
                            Contains("ODC_MODEL_CONFIG='{key: value}'") &&
                            Contains("--set model.config.KEY=VALUE"));
    CHECK(config.get_int("train.steps") == 10);  // all or nothing
  }
  {
    const ScopedEnv typo("ODC_TRAIN_STPES", "5");
    REQUIRE_THROWS_WITH(config.apply_environment(), Contains("did you mean 'ODC_TRAIN_STEPS'?"));
  }
  {
    // The launcher's, the logger's and the build's own variables and other tools' sections are
    // left alone; the map takes a YAML mapping merged key by key.
    const ScopedEnv rank("ODC_LOCAL_RANK", "0");
    const ScopedEnv build("ODC_BUILD_DIR", "/tmp/build");
    const ScopedEnv log("ODC_LOG_ALL_RANKS", "1");
    const ScopedEnv other("ODC_SIM_DEVICES", "8");
    const ScopedEnv map("ODC_MODEL_CONFIG", "{hidden_size: 64}");
    REQUIRE_NOTHROW(config.apply_environment());
  }
  CHECK(config.get_map("model.config")["hidden_size"].as<int>() == 64);
}
