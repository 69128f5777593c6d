// Config layers and their errors: typed defaults, defaults < file < environment < --set, unknown
// keys with suggestions, wrong types, file errors with file:line, required keys, environment
// variables, --set shapes. Elsewhere: maps, dump and canonical text in test_config_dump.cpp,
// ranges in test_config_ranges.cpp, YAML a config cannot mean in test_config_edges.cpp.
#include "odc/core/config.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "unit/core/test_config_support.h"
#include "unit/scoped_env.h"
#include "unit/temp_dir.h"

using Catch::Contains;
using odc::Config;
using odc::TunableSpec;
using odc::ValueKind;
using odc::test::ScopedEnv;
using odc::test::test_specs;
using odc::test::TempDir;

TEST_CASE("config defaults are typed and sourced as 'default'", "[config]") {
  Config config(test_specs());
  CHECK(config.get_double("train.lr") == Approx(3e-4));
  CHECK(config.get_int("train.steps") == 100);
  CHECK(config.get_bool("train.shuffle"));
  CHECK(config.get_string("train.comm") == "odc");
  CHECK(config.source_of("train.lr") == "default");
  CHECK(config.has("train.lr"));
  CHECK_FALSE(config.has("model.checkpoint"));
  CHECK(config.source_of("model.checkpoint") == "unset");
  REQUIRE_THROWS_WITH(config.get_string("data.train"),
                      Contains("config key 'data.train' is required but was not set") &&
                          Contains("path to the training data"));
  REQUIRE_THROWS_WITH(config.get_string("model.checkpoint"),
                      Contains("model.checkpoint") && Contains("no value"));
}

TEST_CASE("config layers: defaults < file < environment < --set", "[config]") {
  TempDir dir("config");
  const std::string file =
      dir.write("run.yaml", "train:\n  lr: 0.1\n  steps: 5\n  comm: collective\ndata:\n"
                            "  train: /data/a.jsonl\n");
  Config config(test_specs());
  config.load_yaml_file(file);
  CHECK(config.get_double("train.lr") == Approx(0.1));
  CHECK(config.source_of("train.lr") == file);

  const ScopedEnv lr("ODC_TRAIN_LR", "0.2");
  const ScopedEnv chunk("ODC_COMM_CHUNK_BYTES", "4096");
  config.apply_environment();
  CHECK(config.get_double("train.lr") == Approx(0.2));
  CHECK(config.source_of("train.lr") == "environment ODC_TRAIN_LR");
  CHECK(config.get_int("comm.chunk_bytes") == 4096);

  config.apply_assignment("train.lr=0.3");
  CHECK(config.get_double("train.lr") == Approx(0.3));
  CHECK(config.source_of("train.lr") == "--set");
  // Keys a layer does not name keep the value of the layer below.
  CHECK(config.get_int("train.steps") == 5);
  CHECK(config.source_of("train.steps") == file);
  CHECK(config.get_string("train.comm") == "collective");
  CHECK(config.get_int("data.minibatch_size") == 4);
  CHECK(config.source_of("data.minibatch_size") == "default");
  CHECK_NOTHROW(config.validate());
}

TEST_CASE("config unknown keys name the path, the source and a suggestion", "[config]") {
  TempDir dir("config");
  Config config(test_specs());
  const std::string typo = dir.write("typo.yaml", "train:\n  steps: 3\n  lrr: 0.1\n");
  REQUIRE_THROWS_WITH(config.load_yaml_file(typo), Contains("unknown config key 'train.lrr'") &&
                                                       Contains(typo + ":3") &&
                                                       Contains("did you mean 'train.lr'?"));
  // The file is applied all or nothing: its valid key before the typo did not stick.
  CHECK(config.get_int("train.steps") == 100);

  SECTION("same key in another section") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  lr: 0.1\n", "inline.yaml"),
                        Contains("'model.lr'") && Contains("did you mean 'train.lr'?"));
  }
  SECTION("misspelled section") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("trian:\n  lr: 0.1\n", "inline.yaml"),
                        Contains("unknown config section 'trian'") &&
                            Contains("inline.yaml:1") && Contains("did you mean 'train'?"));
  }
  SECTION("no near match lists the section's keys") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("comm:\n  banana: 1\n", "inline.yaml"),
                        Contains("'comm.banana'") && Contains("chunk_bytes"));
  }
  SECTION("from --set") {
    REQUIRE_THROWS_WITH(config.apply_assignment("train.lrr=0.1"),
                        Contains("'train.lrr'") && Contains("--set") &&
                            Contains("did you mean 'train.lr'?"));
    REQUIRE_THROWS_WITH(config.apply_assignment("lr=0.1"), Contains("did you mean 'train.lr'?"));
  }
  SECTION("duplicate keys") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  lr: 1\n  lr: 2\n", "dup.yaml"),
                        Contains("'train.lr' appears twice") && Contains("dup.yaml:3"));
  }
}

TEST_CASE("config rejects values of the wrong type", "[config]") {
  Config config(test_specs());
  SECTION("integer") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  steps: 1.5\n", "a.yaml"),
                        Contains("'train.steps'") && Contains("a.yaml:2") &&
                            Contains("an integer") && Contains("'1.5'"));
    REQUIRE_THROWS_WITH(config.apply_assignment("train.steps=abc"),
                        Contains("'train.steps'") && Contains("'abc'"));
    REQUIRE_THROWS_WITH(config.apply_assignment("train.steps=[1, 2]"), Contains("a list"));
    config.apply_assignment("train.steps=-7");
    CHECK(config.get_int("train.steps") == -7);
  }
  SECTION("number accepts integers and floats only") {
    REQUIRE_THROWS_WITH(config.apply_assignment("train.lr=fast"),
                        Contains("'train.lr'") && Contains("a number") && Contains("'fast'"));
    REQUIRE_THROWS_WITH(config.apply_assignment("train.lr=nan"), Contains("'nan'"));
    REQUIRE_THROWS_WITH(config.apply_assignment("train.lr=-inf"), Contains("'-inf'"));
    config.apply_assignment("train.lr=2");
    CHECK(config.get_double("train.lr") == 2.0);
    config.apply_assignment("train.lr=+1.5e-3");
    CHECK(config.get_double("train.lr") == Approx(1.5e-3));
  }
  SECTION("boolean takes the YAML spellings") {
    REQUIRE_THROWS_WITH(config.apply_assignment("train.shuffle=maybe"),
                        Contains("'train.shuffle'") && Contains("true or false"));
    config.apply_assignment("train.shuffle=no");
    CHECK_FALSE(config.get_bool("train.shuffle"));
    config.apply_assignment("train.shuffle=True");
    CHECK(config.get_bool("train.shuffle"));
  }
  SECTION("choices are listed") {
    REQUIRE_THROWS_WITH(config.apply_assignment("train.comm=odx"),
                        Contains("'train.comm'") && Contains("odc, collective") &&
                            Contains("did you mean 'odc'?"));
  }
  SECTION("a section must be a mapping") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("data: 5\n", "b.yaml"),
                        Contains("section 'data'") && Contains("b.yaml:1") &&
                            Contains("mapping"));
    REQUIRE_THROWS_WITH(config.load_yaml_text("- train\n", "c.yaml"), Contains("c.yaml:1"));
  }
  SECTION("a key with a default cannot be unset, one without can") {
    REQUIRE_THROWS_WITH(config.load_yaml_text("train:\n  lr:\n", "d.yaml"),
                        Contains("'train.lr'") && Contains("empty value"));
    config.apply_assignment("train.metrics_file=/tmp/m.jsonl");
    CHECK(config.has("train.metrics_file"));
    config.apply_assignment("train.metrics_file=");
    CHECK_FALSE(config.has("train.metrics_file"));
  }
  SECTION("an empty value of a string key whose default is the empty string is that string") {
    // rl.stop's case: its documented default is empty, and `--set rl.stop=` was refused.
    Config strings({odc::tunable("rl.stop", ValueKind::string, "\"\"", "stop string"),
                    odc::tunable("rl.verifier", ValueKind::string, "exact", "verifier", {"exact", "number"})});
    strings.apply_assignment("rl.stop=e");
    strings.apply_assignment("rl.stop=");
    CHECK(strings.get_string("rl.stop").empty());
    CHECK(strings.source_of("rl.stop") == "--set");
    strings.load_yaml_text("rl:\n  stop:\n", "s.yaml");
    CHECK(strings.get_string("rl.stop").empty());
    REQUIRE_THROWS_WITH(strings.apply_assignment("rl.verifier="), Contains("'rl.verifier'") && Contains("empty value"));
  }
  SECTION("reading a key as the wrong kind is a clear error") {
    REQUIRE_THROWS_WITH(config.get_int("train.lr"), Contains("'train.lr'") && Contains("integer"));
    REQUIRE_THROWS_WITH(config.get_int("train.stepz"),
                        Contains("not declared") && Contains("did you mean 'train.steps'?"));
  }
}

TEST_CASE("config file errors name the file and line", "[config]") {
  TempDir dir("config");
  Config config(test_specs());
  const std::string broken = dir.write("broken.yaml", "train:\n  lr: 0.1\n  steps: [1, 2\n");
  REQUIRE_THROWS_WITH(config.load_yaml_file(broken),
                      Contains("YAML syntax error") && Contains(broken + ":"));
  const std::string bad_line = dir.write("indent.yaml", "train:\n  lr: 0.1\n steps: 2\n");
  REQUIRE_THROWS_WITH(config.load_yaml_file(bad_line), Contains(bad_line + ":3"));
  const std::string missing = dir.file("missing.yaml");
  REQUIRE_THROWS_WITH(config.load_yaml_file(missing),
                      Contains("cannot read config file") && Contains(missing));
  REQUIRE_THROWS_WITH(config.load_yaml_file(dir.file("")), Contains("directory"));
  // An empty file and a section with every key commented out are valid and change nothing.
  CHECK_NOTHROW(config.load_yaml_file(dir.write("empty.yaml", "")));
  CHECK_NOTHROW(config.load_yaml_text("train:\n  # lr: 1\n", "comments.yaml"));
  CHECK(config.get_double("train.lr") == Approx(3e-4));
}

TEST_CASE("config validate names missing required keys and their docs", "[config]") {
  Config config(test_specs());
  REQUIRE_THROWS_WITH(config.validate(), Contains("data.train") &&
                                             Contains("path to the training data") &&
                                             Contains("ODC_DATA_TRAIN"));
  config.apply_assignment("data.train=/data/train.jsonl");
  CHECK_NOTHROW(config.validate());
}

TEST_CASE("config environment values are type-checked and name the variable", "[config]") {
  Config config(test_specs());
  {
    const ScopedEnv steps("ODC_TRAIN_STEPS", "abc");
    REQUIRE_THROWS_WITH(config.apply_environment(),
                        Contains("ODC_TRAIN_STEPS") && Contains("'train.steps'"));
  }
  {
    const ScopedEnv dtype("ODC_MODEL_DTYPE", "bfloat16");
    const ScopedEnv shuffle("ODC_TRAIN_SHUFFLE", "false");
    config.apply_environment();
  }
  CHECK(config.get_string("model.dtype") == "bfloat16");
  CHECK_FALSE(config.get_bool("train.shuffle"));
  CHECK(config.source_of("train.shuffle") == "environment ODC_TRAIN_SHUFFLE");
}

// "~/data.jsonl" after --set or in a file once created a directory named "~" in the current one.
TEST_CASE("config string values do not start with an unexpanded ~/", "[config]") {
  Config config(test_specs());
  REQUIRE_THROWS_WITH(config.apply_assignment("data.train=~/data/train.jsonl"),
                      Contains("'data.train'") && Contains("'~' is not expanded here"));
  REQUIRE_THROWS_WITH(config.load_yaml_text("data:\n  train: ~/x.jsonl\n", "tilde.yaml"),
                      Contains("tilde.yaml:2") && Contains("'~' is not expanded here"));
  config.apply_assignment("data.train=/data/a~b.jsonl");  // a ~ elsewhere is just a character
  CHECK(config.get_string("data.train") == "/data/a~b.jsonl");
}

// A mistyped variable of a known section was silently ignored; others (the build scripts'
// ODC_BUILD_DIR) are not this config's.
TEST_CASE("config environment: an ODC_<SECTION>_ variable that names no key is reported", "[config]") {
  Config config(test_specs());
  const ScopedEnv typo("ODC_TRAIN_STPES", "5");
  const ScopedEnv other("ODC_BUILD_DIR", "/tmp/build");
  const ScopedEnv good("ODC_TRAIN_STEPS", "7");
  REQUIRE_THROWS_WITH(config.apply_environment(),
                      Contains("environment variable ODC_TRAIN_STPES names no config key; did you mean 'ODC_TRAIN_STEPS'?"));
}

TEST_CASE("config --set assignments are checked for shape", "[config]") {
  Config config(test_specs());
  REQUIRE_THROWS_WITH(config.apply_assignment("train.lr"),
                      Contains("key=value") && Contains("'train.lr'"));
  REQUIRE_THROWS_WITH(config.apply_assignment("=5"), Contains("'=5'"));
  REQUIRE_THROWS_WITH(config.apply_assignment("train..lr=5"), Contains("'train..lr'"));
  REQUIRE_THROWS_WITH(config.apply_assignment("model.config={hidden_size: 64"),
                      Contains("YAML syntax error") && Contains("model.config={hidden_size: 64"));
  // A value may itself contain '='; only the first one splits.
  config.apply_assignment("data.train=/data/a=b.jsonl");
  CHECK(config.get_string("data.train") == "/data/a=b.jsonl");
}

TEST_CASE("config --set assignments split at the first '='", "[config]") {
  CHECK(odc::split_assignment(" train.lr =3e-4") == std::pair<std::string, std::string>{"train.lr", "3e-4"});
  CHECK(odc::split_assignment("data.train=/a=b") == std::pair<std::string, std::string>{"data.train", "/a=b"});
  CHECK(odc::split_assignment("train.metrics_file=") == std::pair<std::string, std::string>{"train.metrics_file", ""});
  REQUIRE_THROWS_WITH(odc::split_assignment("train.lr"), Contains("--set expects key=value") && Contains("'train.lr'"));
  REQUIRE_THROWS_WITH(odc::split_assignment(" =1"), Contains("' =1'"));
}

TEST_CASE("closest names are suggested within two edits", "[config]") {
  const std::vector<std::string> names{"--dump-config", "--set", "--calibrate-cost"};
  CHECK(odc::closest_name("--dump_config", names) == "--dump-config");
  CHECK(odc::closest_name("--sett", names) == "--set");
  CHECK(odc::closest_name("--verbose", names).empty());
  CHECK(odc::closest_name("ab", {"ax", "ay"}) == "ax");  // ties: the first declared
}
