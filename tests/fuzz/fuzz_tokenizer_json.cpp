// libFuzzer target: arbitrary bytes as a tokenizer.json. Loading must either succeed or throw
// odc::Error (never crash, hang or throw anything else); a tokenizer that loads must encode and
// decode a short mixed-script string the same way.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const odc::data::Tokenizer tokenizer = odc::data::Tokenizer::from_json_text(json, "<fuzz>");
    const std::string text = "Hello, world! <s> 1234 \xC3\xA9\xE4\xB8\xAD \xF0\x9F\x98\x80\n\t end";
    for (const bool special : {false, true}) {
      const std::vector<std::int32_t> ids = tokenizer.encode(text, special);
      for (const std::int32_t id : ids) {
        if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
      }
      (void)tokenizer.decode(ids, special);
    }
    (void)tokenizer.encode(std::string_view("a\xFF", 2));  // invalid UTF-8: must throw odc::Error
  } catch (const odc::Error&) {
    // Bad input is expected to be rejected with an odc::Error.
  }
  return 0;
}
