// odc-sim [CONFIG.yaml] [--set key.path=value]... [--out DIR] [--dump-config] [--help]
// Simulates Collective (FSDP) vs ODC schedules x LocalSort / LB-Micro / LB-Mini planners on a
// model, a device and a sequence-length distribution; prints one JSON line per method and a
// markdown table.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"
#include "odc/sim/runner.h"
#include "odc/sim/sim_config.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-sim [CONFIG.yaml] [--set key.path=value]... [--out DIR] [--dump-config]

Simulates one global minibatch after another under Collective (FSDP all-gather/reduce-scatter,
a barrier at every layer) and ODC (point-to-point gathers and pushes, one barrier per minibatch)
with the LocalSort, LB-Micro and LB-Mini planners, and reports per method: minibatch time,
samples/s per device, speedup over the baseline, simulated and planned bubble rates and the
zero-overhead bound (the speedup if communication were free).

Values come from the built-in defaults (the paper's golden setting: DeepSeek-R1-Distill-Qwen-1.5B,
8 x A100-80GB, LongAlign-like synthetic lengths, 4 sequences per device), then CONFIG.yaml, then
ODC_<SECTION>_<KEY> environment variables, then --set assignments, e.g.
  odc-sim configs/paper/sft-longalign-1.5b.yaml --set sim.devices=16 --set data.lengths=my_lengths.txt

  --set k=v       override one key (repeatable); --dump-config lists every key with its doc
  --out DIR       also write DIR/results.jsonl, DIR/table.md and DIR/timeline.json (first minibatch)
  --dump-config   print the effective configuration (YAML, with docs) and exit
  --help          this text

Exit status: 0 success, 1 bad input (config values, files), 2 bad command line.
)";

struct Arguments {
  std::string config_file;
  std::vector<std::string> assignments;
  std::string out_dir;
  bool dump_config = false;
  bool help = false;
};

// Command-line mistakes: exit 2 with the usage hint.
struct UsageError {
  std::string message;
};

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  auto value_of = [&](int& i, const std::string& option) -> std::string {
    if (i + 1 >= argc) throw UsageError{fmt::format("{} needs a value", option)};
    return argv[++i];
  };
  auto add_assignment = [&](const std::string& assignment) {
    const auto equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw UsageError{fmt::format("--set expects key.path=value, got '{}'", assignment)};
    }
    args.assignments.push_back(assignment);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      args.help = true;
    } else if (argument == "--dump-config") {
      args.dump_config = true;
    } else if (argument == "--set") {
      add_assignment(value_of(i, argument));
    } else if (argument.starts_with("--set=")) {
      add_assignment(argument.substr(6));
    } else if (argument == "--out") {
      args.out_dir = value_of(i, argument);
      if (args.out_dir.empty()) throw UsageError{"--out needs a directory name"};
    } else if (argument.starts_with("--out=")) {
      args.out_dir = argument.substr(6);
      if (args.out_dir.empty()) throw UsageError{"--out needs a directory name"};
    } else if (argument.size() > 1 && argument.front() == '-') {
      throw UsageError{fmt::format("unknown option '{}'", argument)};
    } else if (argument.empty()) {
      throw UsageError{"empty argument where a config file name was expected"};
    } else if (!args.config_file.empty()) {
      throw UsageError{fmt::format("only one config file may be given, got '{}' and '{}'", args.config_file, argument)};
    } else {
      args.config_file = argument;
    }
  }
  return args;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) odc::fail("--out: cannot write '{}'", path.string());
}

int run(const Arguments& args) {
  const auto config = odc::sim::load_sim_config(args.config_file, args.assignments);
  if (args.dump_config) {
    std::fputs(config.dump().c_str(), stdout);
    return 0;
  }
  const std::string stem =
      args.config_file.empty() ? "default" : std::filesystem::path(args.config_file).stem().string();
  const auto setup = odc::sim::build_setup(config, stem);
  spdlog::info("odc-sim {}: {}; compute: {}", setup.label, setup.pool.description, setup.compute.description);
  for (const auto& note : setup.notes) spdlog::debug("{}", note);
  const auto results = odc::sim::run_simulation(setup);

  std::string lines;
  for (const auto& method : results.methods) lines += odc::sim::method_json(results, method).dump() + "\n";
  const std::string table = odc::sim::markdown_table(results);
  std::fputs(lines.c_str(), stdout);
  std::fputs("\n", stdout);
  std::fputs(table.c_str(), stdout);
  if (!args.out_dir.empty()) {
    const std::filesystem::path dir(args.out_dir);
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) odc::fail("--out: cannot create directory '{}': {}", args.out_dir, error.message());
    write_file(dir / "results.jsonl", lines);
    write_file(dir / "table.md", table);
    write_file(dir / "timeline.json", odc::sim::timelines_json(results).dump() + "\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  try {
    args = parse_arguments(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "odc-sim: usage error: %s (see odc-sim --help)\n", e.message.c_str());
    return 2;
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  spdlog::set_pattern("[odc-sim] %v");
  spdlog::set_level(spdlog::level::warn);
  try {
    return run(args);
  } catch (const odc::Error& e) {
    std::fprintf(stderr, "odc-sim: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odc-sim: unexpected error: %s\n", e.what());
  }
  return 1;
}
