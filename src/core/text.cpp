#include "odc/core/text.h"

#include <cctype>
#include <fmt/format.h>

namespace odc {

namespace {

unsigned char byte_at(std::string_view text, std::size_t pos) { return static_cast<unsigned char>(text[pos]); }

// What a lead byte allows (Unicode Table 3-7): the sequence's length and the range of its second
// byte, narrower than 80..BF where that excludes overlong forms (E0, F0), surrogates (ED) or code
// points past U+10FFFF (F4). length 0: no well-formed sequence begins with this byte.
struct LeadByte {
  std::size_t length;
  unsigned char second_low;
  unsigned char second_high;
};

LeadByte classify_lead(unsigned char lead) {
  if (lead < 0x80) return {1, 0x80, 0xBF};
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead >= 0xE0 && lead <= 0xEF) {
    return {3, static_cast<unsigned char>(lead == 0xE0 ? 0xA0 : 0x80), static_cast<unsigned char>(lead == 0xED ? 0x9F : 0xBF)};
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    return {4, static_cast<unsigned char>(lead == 0xF0 ? 0x90 : 0x80), static_cast<unsigned char>(lead == 0xF4 ? 0x8F : 0xBF)};
  }
  return {0, 0, 0};
}

// How many bytes from text[pos] on, the lead included, follow the pattern of the sequence the lead
// announces (at most its length): the whole sequence when it is well-formed, otherwise the maximal
// subpart that utf8_lossy replaces by one U+FFFD.
std::size_t matched_prefix(std::string_view text, std::size_t pos, const LeadByte& lead) {
  std::size_t matched = 1;
  while (matched < lead.length && pos + matched < text.size()) {
    const unsigned char next = byte_at(text, pos + matched);
    const unsigned char low = matched == 1 ? lead.second_low : 0x80;
    const unsigned char high = matched == 1 ? lead.second_high : 0xBF;
    if (next < low || next > high) break;
    ++matched;
  }
  return matched;
}

}  // namespace

std::string trim(std::string_view text, std::string_view blanks) {
  const std::size_t first = text.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  const std::size_t last = text.find_last_not_of(blanks);
  return std::string(text.substr(first, last - first + 1));
}

std::string lower_ascii(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> split_trimmed(std::string_view text, char separator) {
  std::vector<std::string> items;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = text.find(separator, start);
    items.push_back(trim(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) return items;
    start = end + 1;
  }
}

std::size_t utf8_sequence_length(std::string_view text, std::size_t pos) {
  const LeadByte lead = classify_lead(byte_at(text, pos));
  if (lead.length == 0) return 0;
  return matched_prefix(text, pos, lead) == lead.length ? lead.length : 0;
}

std::size_t invalid_utf8_at(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<char32_t>(byte_at(text, i)); };
  const char32_t lead = byte(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    const char32_t cp = ((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (lead < 0xF0) {
    const char32_t cp = ((lead & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const char32_t cp = ((lead & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) | ((byte(pos + 2) & 0x3F) << 6) |
                      (byte(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

std::size_t code_point_start_before(std::string_view text, std::size_t end, std::size_t floor) {
  std::size_t start = end - 1;
  while (start > floor && (byte_at(text, start) & 0xC0) == 0x80) --start;
  return start;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const LeadByte lead = classify_lead(byte_at(bytes, pos));
    const std::size_t matched = lead.length == 0 ? 1 : matched_prefix(bytes, pos, lead);
    if (matched == lead.length) {
      out.append(bytes.substr(pos, matched));
    } else {
      append_utf8(out, 0xFFFD);
    }
    pos += matched;
  }
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_python_whitespace(char32_t cp) { return is_unicode_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string_view strip(std::string_view text, bool (*is_space)(char32_t), bool left, bool right) {
  // The length of the whitespace code point at pos, or 0 when none is there.
  const auto space_length = [&](std::size_t pos) -> std::size_t {
    const std::size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return 0;
    std::size_t next = pos;
    return is_space(next_code_point(text, next)) ? length : 0;
  };
  std::size_t begin = 0;
  std::size_t end = text.size();
  if (left) {
    while (begin < end) {
      const std::size_t length = space_length(begin);
      if (length == 0) break;
      begin += length;
    }
  }
  if (right) {
    while (end > begin) {
      const std::size_t start = code_point_start_before(text, end, begin);
      if (space_length(start) != end - start) break;
      end = start;
    }
  }
  return text.substr(begin, end - begin);
}

std::string escape_control(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += fmt::format("\\x{:02x}", byte);
    }
  }
  return out;
}

}  // namespace odc
