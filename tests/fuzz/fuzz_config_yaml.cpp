// libFuzzer target: arbitrary bytes as odc-train's CONFIG.yaml. The text takes the path of
// odc::train::load_trainer_config (Config::load_yaml_file reads the file and hands its text to
// load_yaml_text): parsed over the trainer schema's declared defaults, then validated and the model
// section turned into a LlamaConfig, as odc-train does. Rejected input must be an odc::Error; a
// crash, UB, a leak, a hang or any other exception (a YAML:: or nlohmann:: one leaking out of our
// code) is a finding. On the way it checks the loader's documented promises:
//   - all or nothing: a rejected file leaves the config exactly as it was (the defaults);
//   - every key reads back with its declared kind (get_int/get_double/... never fail on a value
//     the loader accepted);
//   - dump() is YAML that loads back to the same canonical() config (test_config's round trip);
//   - an odc::Error is never an "internal check failed" (that message marks a bug, not bad input).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "odc/core/config.h"
#include "odc/core/error.h"
#include "odc/train/config/config_schema.h"

namespace {

const std::vector<odc::TunableSpec>& specs() {
  static const std::vector<odc::TunableSpec> tunables = odc::train::trainer_tunables();
  return tunables;
}

// Reads every key through the getter of its kind, as the trainer does.
void read_all(const odc::Config& config) {
  for (const auto& spec : config.specs()) {
    if (!config.has(spec.path)) continue;
    switch (spec.kind) {
      case odc::ValueKind::integer: (void)config.get_int(spec.path); break;
      case odc::ValueKind::number: (void)config.get_double(spec.path); break;
      case odc::ValueKind::boolean: (void)config.get_bool(spec.path); break;
      case odc::ValueKind::string: (void)config.get_string(spec.path); break;
      case odc::ValueKind::map: (void)config.get_map(spec.path); break;
    }
    (void)config.source_of(spec.path);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Copies of a config are independent (test_config), so the schema's ~50 defaults are parsed once.
  static const odc::Config fresh(specs());
  static const std::string defaults = fresh.canonical();

  odc::Config config = fresh;
  try {
    config.load_yaml_text(text, "fuzz.yaml");
  } catch (const odc::Error& error) {
    odc::fuzz::check_rejection(error);
    if (config.canonical() != defaults) __builtin_trap();  // a rejected file changed the config
    return 0;
  }

  // Accepted: every getter must work, and the dump must load back to the same values. Errors
  // here are findings (the loader accepted what the program cannot use or re-read).
  try {
    read_all(config);
    const std::string canonical = config.canonical();
    for (const bool with_docs : {true, false}) {
      odc::Config reloaded = fresh;
      reloaded.load_yaml_text(config.dump(with_docs), "dump.yaml");
      if (reloaded.canonical() != canonical) __builtin_trap();
    }
  } catch (const odc::Error&) {
    __builtin_trap();
  }

  // What odc-train does next: the required keys, then the model (model.checkpoint names a
  // directory to read, which the fuzzer must not reach into: only the inline model.config).
  try {
    config.validate();
  } catch (const odc::Error& error) {
    odc::fuzz::check_rejection(error);
  }
  try {
    if (config.get_string("model.checkpoint").empty()) {
      const odc::model::LlamaConfig model = odc::train::model_config_from(config);
      (void)model.to_json();
    }
  } catch (const odc::Error& error) {
    odc::fuzz::check_rejection(error);
  }
  return 0;
}
