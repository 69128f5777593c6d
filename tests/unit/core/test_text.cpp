// Text helpers: ASCII trimming, the UTF-8 validator against Unicode's table of well-formed
// sequences (every code point round-trips; overlong forms, surrogates, code points past U+10FFFF
// and truncated sequences are rejected at their lead byte), maximal-subpart replacement, and
// whitespace stripping by Unicode's and Python's rules.
#include <string>
#include <vector>
#include <string_view>

#include <catch2/catch.hpp>

#include "odc/core/text.h"

using namespace odc;

namespace {

constexpr std::size_t npos = std::string_view::npos;

std::string utf8(char32_t code_point) {
  std::string out;
  append_utf8(out, code_point);
  return out;
}

}  // namespace

TEST_CASE("trim removes the given ASCII blanks at both ends only", "[text]") {
  CHECK(trim("  key = value\t") == "key = value");
  CHECK(trim(" \t \t") == "");
  CHECK(trim("") == "");
  CHECK(trim("a") == "a");
  CHECK(trim(" 42\r\n") == "42\r\n");  // spaces and tabs by default
  CHECK(trim(" 42 \r", " \t\r") == "42");
  CHECK(trim("\r\r", " \t\r") == "");
}

TEST_CASE("split_trimmed keeps every item, empty ones included, trimmed of spaces and tabs", "[text]") {
  using V = std::vector<std::string>;
  CHECK(odc::split_trimmed("a, b ,\tc") == V{"a", "b", "c"});
  CHECK(odc::split_trimmed("a,,b") == V{"a", "", "b"});
  CHECK(odc::split_trimmed("") == V{""});
  CHECK(odc::split_trimmed(" , ") == V{"", ""});
  CHECK(odc::split_trimmed("x;y z", ';') == V{"x", "y z"});
}

TEST_CASE("escape_control writes control bytes as escapes and keeps the rest", "[text]") {
  using namespace std::string_literals;
  CHECK(odc::escape_control("1\0 0"s) == "1\\x00 0");  // not \0 then 0: read as one octal escape
  CHECK(odc::escape_control("a\tb\nc\rd") == "a\\tb\\nc\\rd");
  CHECK(odc::escape_control("\x1b[2J\x7f") == "\\x1b[2J\\x7f");
  CHECK(odc::escape_control("caf\xc3\xa9 \\ 'q'") == "caf\xc3\xa9 \\ 'q'");  // UTF-8 and backslashes as they are
}

TEST_CASE("every code point round-trips through the encoder, decoder and validator", "[text]") {
  std::size_t checked = 0, wrong = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string bytes = utf8(cp);
    const std::size_t length = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    std::size_t pos = 0;
    const bool round_trips = bytes.size() == length && utf8_sequence_length(bytes, 0) == length &&
                             utf8_length_of_lead(static_cast<unsigned char>(bytes[0])) == length &&
                             invalid_utf8_at(bytes) == npos && next_code_point(bytes, pos) == cp && pos == length;
    wrong += round_trips ? 0 : 1;
    ++checked;
  }
  CHECK(checked == 0x110000 - 0x800);
  CHECK(wrong == 0);
  // Surrogates, encoded as if they were code points, are not well-formed.
  std::size_t accepted = 0;
  for (char32_t cp = 0xD800; cp <= 0xDFFF; ++cp) accepted += invalid_utf8_at(utf8(cp)) == 0 ? 0 : 1;
  CHECK(accepted == 0);
}

TEST_CASE("the validator names the lead byte of the first ill-formed sequence", "[text]") {
  CHECK(invalid_utf8_at("") == npos);
  CHECK(invalid_utf8_at("plain ASCII") == npos);
  CHECK(invalid_utf8_at("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80") == npos);
  // Overlong forms.
  CHECK(invalid_utf8_at("\xC0\x80") == 0);
  CHECK(invalid_utf8_at("\xC1\xBF") == 0);
  CHECK(invalid_utf8_at("\xE0\x9F\xBF") == 0);      // U+07FF in three bytes
  CHECK(invalid_utf8_at("\xF0\x8F\xBF\xBF") == 0);  // U+FFFF in four bytes
  // Surrogates and past U+10FFFF.
  CHECK(invalid_utf8_at("ab\xED\xA0\x80") == 2);
  CHECK(invalid_utf8_at("\xED\x9F\xBF") == npos);  // U+D7FF, just below
  CHECK(invalid_utf8_at("\xF4\x90\x80\x80") == 0);
  CHECK(invalid_utf8_at("\xF4\x8F\xBF\xBF") == npos);  // U+10FFFF
  CHECK(invalid_utf8_at("\xF5\x80\x80\x80") == 0);
  CHECK(invalid_utf8_at("x\xFF") == 1);
  // Stray continuation bytes, truncated sequences and bad continuation bytes.
  CHECK(invalid_utf8_at("\x80") == 0);
  CHECK(invalid_utf8_at("\xC3\xA9\xA9") == 2);
  CHECK(invalid_utf8_at("a\xE2\x82") == 1);
  CHECK(invalid_utf8_at("ab\xF0\x9F\x98") == 2);
  CHECK(invalid_utf8_at("\xE2\x28\xA1") == 0);
  CHECK(invalid_utf8_at("\xF0\x9F\x98\x28") == 0);
  CHECK(utf8_sequence_length("a\xE2\x82\xAC", 1) == 3);
  CHECK(utf8_sequence_length("a\xE2\x82\xAC", 2) == 0);
}

TEST_CASE("code_point_start_before steps back to the lead byte, never below the floor", "[text]") {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // a é € 😀
  CHECK(code_point_start_before(text, 1) == 0);
  CHECK(code_point_start_before(text, 3) == 1);
  CHECK(code_point_start_before(text, 6) == 3);
  CHECK(code_point_start_before(text, 10) == 6);
  CHECK(code_point_start_before(text, 10, 8) == 8);
}

TEST_CASE("utf8_lossy replaces each maximal ill-formed subpart by one U+FFFD", "[text]") {
  const std::string replacement = utf8(0xFFFD);
  // The example of Unicode's "U+FFFD Substitution of Maximal Subparts" (chapter 3.9).
  CHECK(utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
        "a" + replacement + replacement + replacement + "b" + replacement + "c" + replacement + replacement + "d");
  // An overlong lead is a subpart of its own; its continuation byte is another.
  CHECK(utf8_lossy("\xC0\xAF") == replacement + replacement);
  CHECK(utf8_lossy("\xED\xA0\x80") == replacement + replacement + replacement);
  CHECK(utf8_lossy("x\xF0\x9F\x98") == "x" + replacement);
  const std::string valid = "h\xC3\xA9llo \xF0\x9F\x98\x80";
  CHECK(utf8_lossy(valid) == valid);
}

TEST_CASE("whitespace is Unicode's White_Space, and Python's adds U+001C..U+001F", "[text]") {
  int unicode = 0, python = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    unicode += is_unicode_whitespace(cp) ? 1 : 0;
    python += is_python_whitespace(cp) ? 1 : 0;
  }
  CHECK(unicode == 25);  // the White_Space property of the Unicode Character Database
  CHECK(python == 29);   // sum(chr(i).isspace() for i in range(0x110000)) in CPython 3
  CHECK_FALSE(is_unicode_whitespace(0x1C));
  CHECK(is_python_whitespace(0x1F));
  CHECK_FALSE(is_unicode_whitespace(0x180E));  // Mongolian vowel separator: no longer a space
  CHECK_FALSE(is_unicode_whitespace(0x200B));  // zero-width space is not White_Space
}

TEST_CASE("strip removes whitespace code points at the requested ends", "[text]") {
  const std::string ideographic = utf8(0x3000), nbsp = utf8(0xA0), line_separator = utf8(0x2028);
  const std::string padded = ideographic + " \t" + "hi " + utf8(0x1F600) + nbsp + "\n" + line_separator;
  CHECK(strip(padded, is_unicode_whitespace) == "hi " + utf8(0x1F600));
  CHECK(strip(padded, is_unicode_whitespace, true, false) == "hi " + utf8(0x1F600) + nbsp + "\n" + line_separator);
  CHECK(strip(padded, is_unicode_whitespace, false, true) == ideographic + " \thi " + utf8(0x1F600));
  CHECK(strip(padded, is_unicode_whitespace, false, false) == padded);
  CHECK(strip(" \t" + nbsp, is_unicode_whitespace) == "");
  CHECK(strip("", is_python_whitespace) == "");
  CHECK(strip("\x1C" "a\x1F", is_python_whitespace) == "a");
  CHECK(strip("\x1C" "a\x1F", is_unicode_whitespace) == "\x1C" "a\x1F");
}

TEST_CASE("strip treats ill-formed bytes as text, not as whitespace", "[text]") {
  // C2 20 would decode leniently as U+00A0, and E0 80 A0 is an overlong space: both are kept.
  CHECK(strip(" \xC2 ", is_python_whitespace) == "\xC2");
  CHECK(strip("\xE0\x80\xA0x\xE0\x80\xA0", is_python_whitespace) == "\xE0\x80\xA0x\xE0\x80\xA0");
  // A stray continuation byte after a space keeps the space before it.
  CHECK(strip("a\t\x80", is_python_whitespace) == "a\t\x80");
  CHECK(strip("\t\x80", is_python_whitespace) == "\x80");
  // A truncated sequence at the end is not whitespace either.
  CHECK(strip("a \xE3\x80", is_unicode_whitespace) == "a \xE3\x80");
}
