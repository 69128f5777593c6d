#pragma once
// Text helpers shared by the config engine, the data readers and the tokenizer: ASCII trimming,
// UTF-8 validation, decoding and encoding, and whitespace stripping by Unicode's or Python's rules.
// Strings are bytes (std::string_view); "well-formed UTF-8" is Unicode's definition (Table 3-7):
// no overlong forms, no surrogates (U+D800..U+DFFF), nothing past U+10FFFF, no truncated sequence.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace odc {

// ---- ASCII ------------------------------------------------------------------------------------

// text without its leading and trailing bytes that occur in `blanks` (a config line's spaces and
// tabs by default).
std::string trim(std::string_view text, std::string_view blanks = " \t");

// `text` with ASCII letters in lower case (names compared without case: devices, protocols).
std::string lower_ascii(std::string_view text);

// A separated list's items, each trimmed of spaces and tabs; empty items are kept ("a,,b" has 3,
// "" has 1: the caller decides what an empty one means).
std::vector<std::string> split_trimmed(std::string_view text, char separator = ',');

// Text a message quotes (a command line, a line of its output), its control bytes written as
// escapes: a tab, newline and carriage return as \t \n \r, the others (NUL, DEL, ...) as
// \xNN. A NUL cut the message where it stood; a newline or an escape sequence garbled the terminal.
std::string escape_control(std::string_view text);

// ---- UTF-8 ------------------------------------------------------------------------------------

// Length (1 to 4) of the well-formed UTF-8 sequence that begins at text[pos], or 0 when none does
// (a stray continuation byte, an invalid lead byte, an ill-formed or truncated sequence).
std::size_t utf8_sequence_length(std::string_view text, std::size_t pos);

// Offset of the first byte that does not begin a well-formed UTF-8 sequence, or npos when all of
// text is well-formed.
std::size_t invalid_utf8_at(std::string_view text);

// Length of the sequence a lead byte announces; only meaningful for the lead byte of well-formed
// text.
constexpr std::size_t utf8_length_of_lead(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at text[pos], which must begin a well-formed sequence (checked once for
// the whole text by invalid_utf8_at, not per character), and advances pos past it.
char32_t next_code_point(std::string_view text, std::size_t& pos);

// Where the code point that ends at `end` begins: `end - 1` stepped back over continuation bytes,
// never below `floor`. end must be > floor.
std::size_t code_point_start_before(std::string_view text, std::size_t end, std::size_t floor = 0);

// Appends the UTF-8 encoding of a code point (<= U+10FFFF).
void append_utf8(std::string& out, char32_t code_point);

// bytes as UTF-8, each maximal subpart of an ill-formed sequence replaced by one U+FFFD (Unicode's
// recommended practice, which Rust's String::from_utf8_lossy and the WHATWG decoder follow).
std::string utf8_lossy(std::string_view bytes);

// ---- whitespace -------------------------------------------------------------------------------

// Unicode's White_Space property: what Rust's char::is_whitespace and Oniguruma's \s test.
bool is_unicode_whitespace(char32_t code_point);

// Python's str.isspace(): White_Space plus the separators U+001C..U+001F (what str.strip() removes,
// and with it Jinja's trim filter in chat templates).
bool is_python_whitespace(char32_t code_point);

// text without the leading (`left`) and trailing (`right`) code points that is_space accepts. A
// byte that does not begin a well-formed sequence is never whitespace, so stripping stops there.
std::string_view strip(std::string_view text, bool (*is_space)(char32_t), bool left = true, bool right = true);

}  // namespace odc
