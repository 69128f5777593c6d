#pragma once
// The one refusal of a JSONL record's (or chat message's) unknown fields: a typo such as
// "loss_msk" or "promt", or a field of another record kind, would otherwise be dropped without a
// word and train on what the user did not mean. Names the field, the closest known one, and the
// known fields: "WHERE: unknown field "K" in WHAT; did you mean "N"? (known fields: A, B<HINT>)".
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "odc/core/config.h"
#include "odc/core/error.h"

namespace odc::data {

// The hint that follows the known fields of a record whose unknown fields data.extra_fields skips.
inline constexpr std::string_view kExtraFieldsHint = "; data.extra_fields: ignore skips unknown fields";

inline void refuse_unknown_fields(const nlohmann::json& object, const std::vector<std::string>& known,
                                  const std::string& where, std::string_view what, std::string_view hint = {}) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string nearest = closest_name(key, known);
    fail("{}: unknown field \"{}\" in {}{} (known fields: {}{})", where, key, what,
         nearest.empty() ? std::string() : fmt::format("; did you mean \"{}\"?", nearest),
         fmt::join(known, ", "), hint);
  }
}

}  // namespace odc::data
