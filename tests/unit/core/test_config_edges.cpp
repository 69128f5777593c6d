// Config edges (issue row 15): YAML that yaml-cpp reads but a config cannot mean -- a second
// document, which was dropped silently, and a merge key (<<), which was reported as a misspelt key;
// and what tests/fuzz/fuzz_config_yaml found: cyclic and exploding aliases, non-name map keys,
// invalid UTF-8, NUL characters, plain scalars with control characters and long keys in dump().
#include <catch2/catch.hpp>

#include "odc/core/config.h"
#include "odc/core/error.h"
#include "unit/core/test_config_support.h"
#include "unit/log_capture.h"
#include "unit/scoped_env.h"

#include <cstdlib>
#include <string>
#include <vector>

using Catch::Contains;
using odc::Config;
using odc::ValueKind;
using odc::test::test_specs;

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

// In a YAML file `stop: ### Answer` is valid YAML for an empty value (the rest is a comment), so it
// is not refused, but a run whose stop string silently vanished is not what was meant: warned, naming
// the key, the line and the quoted form.
TEST_CASE("a key whose value YAML reads as a comment is warned about, naming the quoted form", "[config]") {
  Config config(test_specs());
  const odc::test::LogCapture log;
  config.load_yaml_text("data:\n  train: ### Answer\ntrain:\n  metrics_file:\n  lr: 0.1  # a comment after a value\n",
                        "stop.yaml");
  CHECK(log.count("config key 'data.train' in stop.yaml:2 is empty: YAML reads the rest of its line ('### Answer') as "
                  "a comment; if that is the value, quote it: train: \"### Answer\"") == 1);
  CHECK(log.count("metrics_file") == 0);  // empty without a comment: as written
  CHECK(log.count("train.lr") == 0);      // a value, then a comment
  CHECK(log.count("[warning]") == 1);
  // Quoted, it is the value, and nothing is said.
  Config quoted(test_specs());
  const odc::test::LogCapture quiet;
  quoted.load_yaml_text("data:\n  train: \"### Answer\"\n", "stop.yaml");
  CHECK(quoted.get_string("data.train") == "### Answer");
  CHECK(quiet.count("[warning]") == 0);
}

// `--set 'rl.stop=###'` was read as a comment, so rl.stop became "" silently; `a #b` became `a`.
TEST_CASE("config --set and environment values that YAML reads as other text are refused, with the quoted form",
          "[config]") {
  Config config(test_specs());
  const std::string before = config.canonical();
  const auto refused = [&](const std::string& value, const std::string& why) {
    REQUIRE_THROWS_WITH(config.apply_assignment("data.train=" + value),
                        Contains("--set 'data.train=" + value + "': YAML reads the value '" + value + "' as") &&
                            Contains(why) && Contains("quote it: --set 'data.train=\"" + value + "\"'"));
  };
  refused("###", "as an empty value (a '#' starts a YAML comment)");
  refused("### Answer", "(a '#' starts a YAML comment)");
  refused("&x", "('&' starts a YAML anchor)");
  refused("!x", "('!' starts a YAML tag)");
  refused("%x", "('%' starts a YAML directive)");
  refused("|", "('|' and '>' start a YAML block scalar)");
  refused(">", "('|' and '>' start a YAML block scalar)");
  refused("a #b", "as 'a' (a '#' after a space starts a YAML comment)");
  REQUIRE_THROWS_WITH(config.apply_assignment("data.train=\\x #y"), Contains("quote it: --set 'data.train=\"\\\\x #y\"'"));
  CHECK(config.canonical() == before);
  {
    const odc::test::ScopedEnv stop("ODC_DATA_TRAIN", "#x");
    REQUIRE_THROWS_WITH(config.apply_environment(), Contains("environment ODC_DATA_TRAIN: YAML reads the value '#x'") &&
                                                        Contains("quote it: ODC_DATA_TRAIN='\"#x\"'"));
  }
  // Quoted, the text is taken as written; plain text that YAML keeps (a '#' inside a word, spaces) too.
  for (const auto& [value, text] : std::vector<std::pair<std::string, std::string>>{
           {"\"###\"", "###"}, {"'a #b'", "a #b"}, {"\"|\"", "|"}, {"a#b", "a#b"}, {"a b", "a b"}, {" x ", "x"}}) {
    config.apply_assignment("data.train=" + value);
    CHECK(config.get_string("data.train") == text);
  }
  config.apply_assignment("model.checkpoint=");  // empty is empty, null is null
  config.apply_assignment("model.checkpoint=~");
  CHECK_FALSE(config.has("model.checkpoint"));
}
