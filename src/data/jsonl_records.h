#pragma once
// The one loop of the JSONL readers (tokens, chat/text, rollouts, prompts): every non-blank line of a
// file (or stream) parsed as JSON and handed on with where it came from ("path:line"). Errors name the file (and
// the line): it cannot be opened (`expected` says what it should be), a line is not JSON, or the
// read fails midway.
#include <cstdint>
#include <fstream>
#include <istream>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "odc/core/error.h"

namespace odc::data {

// visit(const nlohmann::json& record, const std::string& where, std::int64_t line) for each record
// of `in`, whose lines are named "<name>:<line>".
template <typename Visit>
void read_jsonl_stream(std::istream& in, const std::string& name, Visit&& visit) {
  std::string line;
  std::int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", name, line_number);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      fail("{}: malformed JSON ({})", where, e.what());
    }
    visit(record, where, line_number);
  }
  if (in.bad()) fail("{}: read error after line {}", name, line_number);
}

// The same over the file `path`. `cannot_open` is the whole message after "<path>: " when the file
// does not open.
template <typename Visit>
void read_jsonl_records(const std::string& path, std::string_view cannot_open, Visit&& visit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: {}", path, cannot_open);
  read_jsonl_stream(in, path, std::forward<Visit>(visit));
}

}  // namespace odc::data
