#pragma once
// A parity case file (tests/parity/*.py write it, the dump harnesses read it): the JSON itself and
// its "sequences", each with input_ids and an optional loss_mask (all ones when absent).
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"

namespace odc::parity {

struct Sequence {
  std::vector<std::int32_t> input_ids;
  std::vector<std::uint8_t> loss_mask;
  double targets = 0.0;  // positions i >= 1 with loss_mask[i] != 0
};

inline nlohmann::json read_case(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail("cannot open case file '{}'", path);
  try {
    return nlohmann::json::parse(file);
  } catch (const nlohmann::json::exception& e) {
    fail("case file '{}' is not valid JSON: {}", path, e.what());
  }
}

inline std::vector<Sequence> read_sequences(const nlohmann::json& spec, const std::string& where) {
  std::vector<Sequence> out;
  for (const auto& s : spec.at("sequences")) {
    Sequence seq;
    seq.input_ids = s.at("input_ids").get<std::vector<std::int32_t>>();
    seq.loss_mask = s.contains("loss_mask") ? s.at("loss_mask").get<std::vector<std::uint8_t>>()
                                            : std::vector<std::uint8_t>(seq.input_ids.size(), 1);
    if (seq.loss_mask.size() != seq.input_ids.size()) {
      fail("{}: sequence {} has {} ids but {} mask entries", where, out.size(), seq.input_ids.size(),
           seq.loss_mask.size());
    }
    for (std::size_t i = 1; i < seq.loss_mask.size(); ++i) seq.targets += seq.loss_mask[i] != 0 ? 1.0 : 0.0;
    out.push_back(std::move(seq));
  }
  return out;
}

}  // namespace odc::parity
