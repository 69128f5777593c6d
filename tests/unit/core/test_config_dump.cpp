// Config maps and output: map tunables merged over layers and nested --set paths, independent
// copies, dump() as YAML that loads back to the same config, and canonical() (the text ranks
// fingerprint and checkpoints store) comparing effective values and pinned byte for byte.
#include "odc/core/config.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "unit/core/test_config_support.h"

using Catch::Contains;
using odc::Config;
using odc::TunableSpec;
using odc::ValueKind;
using odc::test::test_specs;

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
