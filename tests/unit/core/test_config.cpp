#include "odc/core/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <unistd.h>

#include "odc/core/error.h"
#include "unit/scoped_env.h"

namespace {

using Catch::Contains;
using odc::Config;
using odc::TunableSpec;
using odc::ValueKind;

// A small table shaped like the trainer's: optional keys, a required one, choices, a map tunable.
std::vector<TunableSpec> test_specs() {
  return {
      {"model.checkpoint", ValueKind::string, "", "HF checkpoint directory", {}, false},
      {"model.config", ValueKind::map, "", "HF config.json fields", {}, false},
      {"model.dtype", ValueKind::string, "float32", "compute dtype", {"float32", "bfloat16"}, false},
      {"data.train", ValueKind::string, "", "path to the training data", {}, true},
      {"data.minibatch_size", ValueKind::integer, "4", "sequences per rank per step", {}, false},
      {"train.comm", ValueKind::string, "odc", "communication scheme", {"odc", "collective"}, false},
      {"train.lr", ValueKind::number, "3e-4", "peak learning rate", {}, false},
      {"train.steps", ValueKind::integer, "100", "optimizer steps", {}, false},
      {"train.shuffle", ValueKind::boolean, "true", "shuffle the data", {}, false},
      {"train.metrics_file", ValueKind::string, "", "JSONL metrics output", {}, false},
      {"comm.chunk_bytes", ValueKind::integer, "1048576", "bytes per transfer chunk", {}, false},
  };
}

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

// A fresh directory per test case, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "odc_config_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::ofstream(file) << text;
    return file.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

using odc::test::ScopedEnv;

}  // namespace

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
  TempDir dir;
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
  TempDir dir;
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
  SECTION("reading a key as the wrong kind is a clear error") {
    REQUIRE_THROWS_WITH(config.get_int("train.lr"), Contains("'train.lr'") && Contains("integer"));
    REQUIRE_THROWS_WITH(config.get_int("train.stepz"),
                        Contains("not declared") && Contains("did you mean 'train.steps'?"));
  }
}

TEST_CASE("config file errors name the file and line", "[config]") {
  TempDir dir;
  Config config(test_specs());
  const std::string broken = dir.write("broken.yaml", "train:\n  lr: 0.1\n  steps: [1, 2\n");
  REQUIRE_THROWS_WITH(config.load_yaml_file(broken),
                      Contains("YAML syntax error") && Contains(broken + ":"));
  const std::string bad_line = dir.write("indent.yaml", "train:\n  lr: 0.1\n steps: 2\n");
  REQUIRE_THROWS_WITH(config.load_yaml_file(bad_line), Contains(bad_line + ":3"));
  const std::string missing = dir.path("missing.yaml");
  REQUIRE_THROWS_WITH(config.load_yaml_file(missing),
                      Contains("cannot read config file") && Contains(missing));
  REQUIRE_THROWS_WITH(config.load_yaml_file(dir.path("")), Contains("directory"));
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

TEST_CASE("config map tunables merge layers and take nested --set paths", "[config]") {
  Config config(test_specs());
  config.load_yaml_text(
      "model:\n  config:\n    hidden_size: 64\n    num_hidden_layers: 2\n"
      "    rope_scaling: {factor: 8.0, type: llama3}\n",
      "model.yaml");
  config.apply_assignment("model.config.hidden_size=256");
  config.apply_assignment("model.config.rope_scaling.factor=2");
  config.apply_assignment("model.config={vocab_size: 1000}");
  const YAML::Node map = config.get_map("model.config");
  CHECK(map["hidden_size"].as<int>() == 256);
  CHECK(map["num_hidden_layers"].as<int>() == 2);
  CHECK(map["vocab_size"].as<int>() == 1000);
  CHECK(map["rope_scaling"]["factor"].as<double>() == 2.0);
  CHECK(map["rope_scaling"]["type"].as<std::string>() == "llama3");
  CHECK(config.source_of("model.config") == "model.yaml + --set");

  // get_map hands out a copy: editing it leaves the config alone.
  YAML::Node copy = config.get_map("model.config");
  copy["hidden_size"] = 1;
  CHECK(config.get_map("model.config")["hidden_size"].as<int>() == 256);

  REQUIRE_THROWS_WITH(config.apply_assignment("model.config=5"),
                      Contains("'model.config'") && Contains("mapping"));
  REQUIRE_THROWS_WITH(config.apply_assignment("train.lr.value=1"),
                      Contains("'train.lr'") && Contains("train.lr.value"));
  // Unsetting the whole map (no default) lets a later layer start afresh.
  config.apply_assignment("model.config=");
  CHECK_FALSE(config.has("model.config"));
  config.apply_assignment("model.config.hidden_size=32");
  CHECK(config.get_map("model.config")["hidden_size"].as<int>() == 32);
  CHECK(config.get_map("model.config").size() == 1);
}

TEST_CASE("config copies are independent", "[config]") {
  Config original(test_specs());
  original.apply_assignment("model.config.hidden_size=64");
  Config copy = original;
  copy.apply_assignment("model.config.hidden_size=128");
  copy.apply_assignment("train.lr=0.5");
  CHECK(original.get_map("model.config")["hidden_size"].as<int>() == 64);
  CHECK(original.get_double("train.lr") == Approx(3e-4));
}

TEST_CASE("config dump is YAML that loads back to the same config", "[config]") {
  Config config(test_specs());
  config.load_yaml_text(
      "model:\n  config: {hidden_size: 64, name: \"true\", layers: [1, 2], note: \"a: b # c\"}\n"
      "data:\n  train: \"/data/with space.jsonl\"\n"
      "train:\n  lr: 1e-3\n  shuffle: no\n  comm: collective\n  metrics_file: \"null\"\n",
      "run.yaml");
  config.apply_assignment("model.checkpoint=");

  const std::string text = config.dump();
  INFO(text);
  CHECK_NOTHROW(YAML::Load(text));
  CHECK_THAT(text, Contains("lr: 1e-3  # peak learning rate [from run.yaml]"));
  CHECK_THAT(text, Contains("chunk_bytes: 1048576  # bytes per transfer chunk"));
  // Sections in declaration order.
  const auto model = text.find("model:");
  const auto data = text.find("\ndata:");
  const auto train = text.find("\ntrain:");
  const auto comm = text.find("\ncomm:");
  CHECK(model < data);
  CHECK(data < train);
  CHECK(train < comm);

  Config reloaded(test_specs());
  reloaded.load_yaml_text(text, "dump.yaml");
  CHECK(reloaded.canonical() == config.canonical());
  CHECK(reloaded.get_string("train.metrics_file") == "null");
  CHECK(reloaded.get_map("model.config")["name"].as<std::string>() == "true");

  Config bare(test_specs());
  bare.load_yaml_text(config.dump(false), "bare.yaml");
  CHECK(bare.canonical() == config.canonical());
  CHECK_THAT(config.dump(false), !Contains("peak learning rate"));

  // Unset keys are dumped too, so the round trip holds from a fresh config as well.
  Config fresh(test_specs());
  Config fresh_reloaded(test_specs());
  fresh_reloaded.load_yaml_text(fresh.dump(), "fresh.yaml");
  CHECK(fresh_reloaded.canonical() == fresh.canonical());
  CHECK_THAT(fresh.dump(), Contains("train: null  # path to the training data [required]"));
}

TEST_CASE("config map tunable with a default round-trips and merges into it", "[config]") {
  std::vector<TunableSpec> specs = test_specs();
  specs.push_back({"model.overrides", ValueKind::map, "{dropout: 0.0}", "extra fields", {}, false});
  Config config(specs);
  CHECK(config.get_map("model.overrides")["dropout"].as<double>() == 0.0);
  config.apply_assignment("model.overrides.bias=true");
  CHECK(config.get_map("model.overrides").size() == 2);
  CHECK(config.source_of("model.overrides") == "default + --set");
  REQUIRE_THROWS_WITH(config.apply_assignment("model.overrides="), Contains("empty value"));

  Config empty_map(specs);
  empty_map.apply_assignment("model.config={}");
  Config reloaded(specs);
  reloaded.load_yaml_text(empty_map.dump(), "dump.yaml");
  CHECK(reloaded.canonical() == empty_map.canonical());
  CHECK(reloaded.get_map("model.config").size() == 0);
}

TEST_CASE("config canonical text compares effective values", "[config]") {
  Config a(test_specs());
  Config b(test_specs());
  CHECK(a.canonical() == b.canonical());
  a.apply_assignment("train.lr=0.0003");  // the same number as the default 3e-4
  b.apply_assignment("train.shuffle=yes");  // the same boolean as the default true
  CHECK(a.canonical() == b.canonical());
  a.apply_assignment("model.config={x: 1, y: 2}");
  b.apply_assignment("model.config={y: 2, x: 1}");
  CHECK(a.canonical() == b.canonical());
  b.apply_assignment("train.steps=101");
  CHECK(a.canonical() != b.canonical());
  CHECK_THAT(b.canonical(), Contains("train.steps=101\n"));
}

// Config::canonical() is fingerprinted across ranks and stored in checkpoints: its text must not
// change with the code around it. Pinned for every kind, a map, escapes and an unset key.
TEST_CASE("config canonical text is pinned", "[config]") {
  Config config(test_specs());
  config.load_yaml_text(
      "model:\n  config: {b: [1, \"two\"], a: {y: 2, x: \"q\\\"\\\\\"}}\n"
      "data:\n  train: /data/a b.jsonl\n"
      "train:\n  lr: 0.0003\n  steps: +12\n  shuffle: off\n  metrics_file: \"tab\\there\"\n",
      "run.yaml");
  CHECK(config.canonical() ==
        "model.checkpoint=null\n"
        "model.config={\"a\":{\"x\":\"q\\\"\\\\\",\"y\":\"2\"},\"b\":[\"1\",\"two\"]}\n"
        "model.dtype=\"float32\"\n"
        "data.train=\"/data/a b.jsonl\"\n"
        "data.minibatch_size=4\n"
        "train.comm=\"odc\"\n"
        "train.lr=0.0003\n"
        "train.steps=12\n"
        "train.shuffle=false\n"
        "train.metrics_file=\"tab\\x09here\"\n"
        "comm.chunk_bytes=1048576\n");
}

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

// Found by tests/fuzz/fuzz_config_yaml: YAML::Load accepts an alias inside the node its anchor
// names (canonical() then overflowed the stack walking the cycle) and nested aliases that expand
// to billions of nodes (dump() and canonical() hung). Both are rejected where the alias is.
TEST_CASE("config rejects cyclic and exploding YAML aliases with the file and line", "[config]") {
  Config config(test_specs());
  const std::string before = config.canonical();
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config: &a {x: *a}\n", "loop.yaml"),
                      Contains("loop.yaml:2:") && Contains("*a") && Contains("cycle"));
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config:\n    x: &b [1, [2, *b]]\n", "loop.yaml"),
                      Contains("loop.yaml:3:") && Contains("*b") && Contains("cycle"));
  REQUIRE_THROWS_WITH(config.apply_assignment("model.config=&c {x: *c}"), Contains("*c") && Contains("cycle"));

  std::string bomb = "model:\n  config:\n    l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int level = 1; level <= 9; ++level) {
    bomb += fmt::format("    l{1}: &l{1} [*l{0}, *l{0}, *l{0}, *l{0}, *l{0}, *l{0}, *l{0}, *l{0}, *l{0}, *l{0}]\n",
                        level - 1, level);
  }
  REQUIRE_THROWS_WITH(config.load_yaml_text(bomb, "bomb.yaml"),
                      Contains("bomb.yaml:") && Contains("aliases") && Contains("10000 nodes"));
  CHECK(config.canonical() == before);

  // Reusing an anchor, even many times, is fine.
  config.load_yaml_text("model:\n  config: {hidden_size: &h 64, intermediate_size: *h, a: &l [1, 2], b: *l}\n",
                        "reuse.yaml");
  CHECK(config.get_map("model.config")["intermediate_size"].as<int>() == 64);
  CHECK(config.get_map("model.config")["b"].size() == 2);
  Config reloaded(test_specs());
  reloaded.load_yaml_text(config.dump(), "dump.yaml");
  CHECK(reloaded.canonical() == config.canonical());
}

// Found by tests/fuzz/fuzz_config_yaml: a list, mapping or null as a key inside model.config was
// accepted, and odc-train then died of an uncaught YAML::TypedBadConversion turning it into JSON.
TEST_CASE("config map tunables take only names as keys at any depth", "[config]") {
  Config config(test_specs());
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config: {[1, 2]: 3}\n", "keys.yaml"),
                      Contains("'model.config'") && Contains("keys.yaml:2") && Contains("a key that is a list"));
  REQUIRE_THROWS_WITH(
      config.load_yaml_text("model:\n  config:\n    rope_scaling:\n      ? {a: 1}\n      : 2\n", "keys.yaml"),
      Contains("'model.config'") && Contains("keys.yaml:4") && Contains("a key that is a mapping"));
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config:\n    layers: [1, {~: 1}]\n", "keys.yaml"),
                      Contains("keys.yaml:3") && Contains("a key that is an empty value"));
  REQUIRE_THROWS_WITH(config.apply_assignment("model.config.extra={[1]: 2}"),
                      Contains("'model.config'") && Contains("--set") && Contains("a list"));
  CHECK_FALSE(config.has("model.config"));
}

// Found by tests/fuzz/fuzz_config_yaml: yaml-cpp passes invalid UTF-8 through. In model.config,
// "vocab_size: 6\xEE" reached nlohmann::json, whose dump() (in the model config's error message)
// threw type_error.316 past odc-train's odc::Error handling; in a string value the dump replaced
// the bytes, so it no longer loaded back to the same config.
TEST_CASE("config values hold only valid UTF-8 text", "[config]") {
  Config config(test_specs());
  const std::string before = config.canonical();
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config:\n    vocab_size: 6\xEE\n", "utf8.yaml"),
                      Contains("'model.config'") && Contains("utf8.yaml:3") && Contains("not valid UTF-8") &&
                          Contains("0xee after '6'"));
  for (const std::string bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ab\xE2\x82", "\xFF"}) {
    REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config:\n    list: [ok, \"" + bad + "\"]\n", "utf8.yaml"),
                        Contains("utf8.yaml:3") && Contains("not valid UTF-8"));
    REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config: {\"k" + bad + "\": 1}\n", "utf8.yaml"),
                        Contains("utf8.yaml:2") && Contains("not valid UTF-8"));
    REQUIRE_THROWS_WITH(config.load_yaml_text("data:\n  train: \"/data/a" + bad + ".jsonl\"\n", "utf8.yaml"),
                        Contains("'data.train'") && Contains("utf8.yaml:2") && Contains("not valid UTF-8"));
  }
  REQUIRE_THROWS_WITH(config.apply_assignment("data.train=/data/\xFD.jsonl"),
                      Contains("'data.train'") && Contains("--set") && Contains("not valid UTF-8"));
  CHECK(config.canonical() == before);

  const std::string text = "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // 2-, 3- and 4-byte characters
  config.load_yaml_text("model:\n  config: {name: \"" + text + "\"}\ndata:\n  train: /data/" + text + "\n", "utf8.yaml");
  CHECK(config.get_map("model.config")["name"].as<std::string>() == text);
  Config reloaded(test_specs());
  reloaded.load_yaml_text(config.dump(), "dump.yaml");
  CHECK(reloaded.get_string("data.train") == "/data/" + text);
  CHECK(reloaded.canonical() == config.canonical());
}

// A NUL from YAML's "\0" escape once reached the file system, which cut the path at it: the run
// opened "/data/a" for "/data/a\0b.jsonl", and errors named the cut path.
TEST_CASE("config values hold no NUL character", "[config]") {
  Config config(test_specs());
  const std::string before = config.canonical();
  REQUIRE_THROWS_WITH(config.load_yaml_text("data:\n  train: \"/data/a\\0b.jsonl\"\n", "nul.yaml"),
                      Contains("'data.train'") && Contains("nul.yaml:2") && Contains("NUL character") &&
                          Contains("after '/data/a'"));
  REQUIRE_THROWS_WITH(config.load_yaml_text("model:\n  config: {name: \"x\\0\"}\n", "nul.yaml"),
                      Contains("'model.config'") && Contains("NUL character"));
  CHECK(config.canonical() == before);
}

// Found by tests/fuzz/fuzz_config_yaml: yaml-cpp keeps a lone carriage return inside a plain
// scalar, but its emitter wrote the scalar plain again, so the dump read it back without the CR.
TEST_CASE("config dump keeps control characters of plain scalars", "[config]") {
  Config config(test_specs());
  config.load_yaml_text("model:\n  config: {a: 4.0\r, b: [x\ty]}\ndata:\n  train: /data/a\r # comment\n", "cr.yaml");
  REQUIRE(config.get_string("data.train") == "/data/a\r");
  REQUIRE(config.get_map("model.config")["a"].as<std::string>() == "4.0\r");
  for (const bool with_docs : {true, false}) {
    Config reloaded(test_specs());
    reloaded.load_yaml_text(config.dump(with_docs), "dump.yaml");
    CHECK(reloaded.get_string("data.train") == "/data/a\r");
    CHECK(reloaded.canonical() == config.canonical());
  }
}

// Found by tests/fuzz/fuzz_config_yaml: yaml-cpp's emitter wrote a key of more than 1024
// characters as an implicit key, which YAML (and yaml-cpp's own parser) does not allow, so the
// dump of a config with a long key inside model.config did not load at all.
TEST_CASE("config dump writes long map keys in the explicit form", "[config]") {
  const std::string plain(1100, 'k');
  const std::string control = std::string(150, 'c') + std::string(250, '\x1d');  // 1150 characters escaped
  Config config(test_specs());
  config.load_yaml_text("model:\n  config:\n    ? " + plain + "\n    : 1\n    \"" + control + "\":\n      ? " + plain +
                            "\n      : [2]\n",
                        "long.yaml");
  REQUIRE(config.get_map("model.config")[plain].as<int>() == 1);
  for (const bool with_docs : {true, false}) {
    Config reloaded(test_specs());
    reloaded.load_yaml_text(config.dump(with_docs), "dump.yaml");
    CHECK(reloaded.get_map("model.config")[control][plain][0].as<int>() == 2);
    CHECK(reloaded.canonical() == config.canonical());
  }
}
