// Synthetic SFT data. The random numbers come from core/random.h (xoshiro256** seeded by
// splitmix64, Box-Muller normals) rather than <random> distributions, whose output differs
// between standard libraries: the same seed must give the same file everywhere.
#include "odc/data/synth.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "odc/core/error.h"
#include "odc/core/random.h"

namespace odc::data {

namespace {

constexpr std::int32_t kBos = 1;
constexpr std::int32_t kSep = 2;
constexpr std::int32_t kEos = 3;
constexpr std::int32_t kFirstTaskMarker = 4;  // copy, reverse, sort, add in this order
constexpr std::int32_t kFirstPayload = 8;
constexpr std::int32_t kFirstDigit = 8;       // add: digits 0..9 are tokens 8..17
constexpr std::int64_t kMinVocab = 18;
constexpr std::int64_t kMinLength = 8;        // the shortest layout any task can fill
// <bos> <task> ... <sep> ... <eos>
constexpr std::int64_t kFrameTokens = 4;

enum class Task { copy = 0, reverse = 1, sort = 2, add = 3 };
constexpr std::array<const char*, 4> kTaskNames = {"copy", "reverse", "sort", "add"};

// One sequence's stream of draws.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : generator_(seed) {}
  std::uint64_t below(std::uint64_t bound) { return uniform_below(generator_, bound); }
  double normal() {
    const double u1 = unit_open_zero(generator_.next());
    const double u2 = unit_open_zero(generator_.next());
    return box_muller(u1, u2);
  }

 private:
  Xoshiro256StarStar generator_;
};

std::vector<Task> validate(const SynthOptions& o) {
  if (o.num_sequences < 1) fail("synth option num_sequences must be >= 1, got {}", o.num_sequences);
  if (o.vocab_size < kMinVocab || o.vocab_size > std::numeric_limits<std::int32_t>::max()) {
    fail("synth option vocab_size must be in [{}, {}] (8 special tokens + 10 digits), got {}",
         kMinVocab, std::numeric_limits<std::int32_t>::max(), o.vocab_size);
  }
  if (o.min_length < kMinLength) {
    fail("synth option min_length must be >= {}, got {}", kMinLength, o.min_length);
  }
  if (o.max_length < o.min_length) {
    fail("synth option max_length must be >= min_length = {}, got {}", o.min_length, o.max_length);
  }
  if (!(o.mean_length > 0) || !std::isfinite(o.mean_length)) {
    fail("synth option mean_length must be a finite number > 0, got {}", o.mean_length);
  }
  if (!(o.sigma >= 0) || !std::isfinite(o.sigma)) {
    fail("synth option sigma must be a finite number >= 0, got {}", o.sigma);
  }
  if (o.tasks.empty()) fail("synth option tasks must name at least one of copy, reverse, sort, add");
  std::vector<Task> tasks;
  for (const auto& name : o.tasks) {
    const auto it = std::find(kTaskNames.begin(), kTaskNames.end(), name);
    if (it == kTaskNames.end()) {
      fail("synth option tasks: unknown task '{}' (known: copy, reverse, sort, add)", name);
    }
    tasks.push_back(static_cast<Task>(it - kTaskNames.begin()));
  }
  const bool has_even_task =
      std::any_of(tasks.begin(), tasks.end(), [](Task t) { return t != Task::add; });
  if (has_even_task && o.min_length == o.max_length && o.min_length % 2 != 0) {
    fail("synth options min_length = max_length = {} is odd, but copy/reverse/sort sequences "
         "always have even length; use an even length or tasks = add only",
         o.min_length);
  }
  return tasks;
}

// Copy, reverse and sort: 2n + 4 tokens. An odd budget becomes L-1 or L+1 (coin flip, so the mean
// length is not biased), whichever lies in [min, max].
SynthSequence make_symbol_task(Task task, std::int64_t length, const SynthOptions& o, Rng& rng) {
  if (length % 2 != 0) {
    const bool up = rng.below(2) == 1;
    if (up && length + 1 <= o.max_length) {
      ++length;
    } else if (length - 1 >= o.min_length) {
      --length;
    } else {
      ++length;  // validate() guarantees min < max here, so L+1 fits
    }
  }
  const auto n = static_cast<std::size_t>((length - kFrameTokens) / 2);
  const auto payload_symbols = static_cast<std::uint64_t>(o.vocab_size - kFirstPayload);
  std::vector<std::int32_t> input(n);
  for (auto& symbol : input) {
    symbol = kFirstPayload + static_cast<std::int32_t>(rng.below(payload_symbols));
  }
  std::vector<std::int32_t> output = input;
  if (task == Task::reverse) std::reverse(output.begin(), output.end());
  if (task == Task::sort) std::sort(output.begin(), output.end());

  SynthSequence seq;
  seq.input_ids.reserve(static_cast<std::size_t>(length));
  seq.input_ids.push_back(kBos);
  seq.input_ids.push_back(kFirstTaskMarker + static_cast<std::int32_t>(task));
  seq.input_ids.insert(seq.input_ids.end(), input.begin(), input.end());
  seq.input_ids.push_back(kSep);
  seq.input_ids.insert(seq.input_ids.end(), output.begin(), output.end());
  seq.input_ids.push_back(kEos);
  seq.loss_mask.assign(seq.input_ids.size(), 0);
  std::fill(seq.loss_mask.end() - static_cast<std::ptrdiff_t>(n + 1), seq.loss_mask.end(), 1);
  return seq;
}

// Add:  <bos> <add> a <add> b <sep> s <eos>  with fixed-width, zero-padded, most-significant-first
// numbers (the <add> marker doubles as the plus sign). The widths split L-5 tokens as evenly as
// possible with the sum at least as wide as either operand, so every length is hit exactly.
SynthSequence make_add_task(std::int64_t length, Rng& rng) {
  const std::int64_t digits = length - (kFrameTokens + 1);
  const std::int64_t w = digits / 3;
  const std::int64_t r = digits % 3;
  const auto width_sum = static_cast<std::size_t>(w + (r >= 1 ? 1 : 0));
  const auto width_a = static_cast<std::size_t>(w + (r == 2 ? 1 : 0));
  const auto width_b = static_cast<std::size_t>(w);

  // Digits least significant first while computing; the operands are zero-extended to the sum's
  // width. Redraw until the sum fits its width (no carry out): accepted with probability >= 0.45.
  std::vector<int> a(width_sum, 0), b(width_sum, 0), s(width_sum, 0);
  for (;;) {
    for (std::size_t i = 0; i < width_a; ++i) a[i] = static_cast<int>(rng.below(10));
    for (std::size_t i = 0; i < width_b; ++i) b[i] = static_cast<int>(rng.below(10));
    int carry = 0;
    for (std::size_t i = 0; i < width_sum; ++i) {
      const int total = a[i] + b[i] + carry;
      s[i] = total % 10;
      carry = total / 10;
    }
    if (carry == 0) break;
  }

  SynthSequence seq;
  auto& ids = seq.input_ids;
  ids.reserve(static_cast<std::size_t>(length));
  const auto add_marker = kFirstTaskMarker + static_cast<std::int32_t>(Task::add);
  const auto put_number = [&ids](const std::vector<int>& number, std::size_t width) {
    for (std::size_t i = width; i-- > 0;) ids.push_back(kFirstDigit + number[i]);
  };
  ids.push_back(kBos);
  ids.push_back(add_marker);
  put_number(a, width_a);
  ids.push_back(add_marker);
  put_number(b, width_b);
  ids.push_back(kSep);
  put_number(s, width_sum);
  ids.push_back(kEos);
  seq.loss_mask.assign(ids.size(), 0);
  std::fill(seq.loss_mask.end() - static_cast<std::ptrdiff_t>(width_sum + 1), seq.loss_mask.end(),
            1);
  return seq;
}

}  // namespace

namespace {

// Sequence i of a validated option set: one random stream per sequence, so sequence i does not
// depend on how many are generated, and a writer can produce them one at a time.
class SynthStream {
 public:
  explicit SynthStream(const SynthOptions& options)
      : options_(options),
        tasks_(validate(options)),
        // mu chosen so that the mean of the unclipped log-normal is mean_length.
        mu_(std::log(options.mean_length) - 0.5 * options.sigma * options.sigma),
        base_(splitmix64(options.seed)) {}

  SynthSequence at(std::int64_t i) const {
    Rng rng(splitmix64(substream_seed(base_, static_cast<std::uint64_t>(i))));
    const double drawn = std::exp(mu_ + options_.sigma * rng.normal());
    // Clip in floating point first: exp() may overflow any integer type.
    const double clipped = std::clamp(drawn, static_cast<double>(options_.min_length),
                                      static_cast<double>(options_.max_length));
    const auto length = static_cast<std::int64_t>(std::llround(clipped));
    const Task task = tasks_[static_cast<std::size_t>(rng.below(tasks_.size()))];
    return task == Task::add ? make_add_task(length, rng) : make_symbol_task(task, length, options_, rng);
  }

 private:
  const SynthOptions& options_;
  std::vector<Task> tasks_;
  double mu_;
  std::uint64_t base_;
};

void append_jsonl(const SynthSequence& seq, std::string& line) {
  line.clear();
  line += "{\"input_ids\":[";
  for (std::size_t j = 0; j < seq.input_ids.size(); ++j) {
    if (j > 0) line += ',';
    line += std::to_string(seq.input_ids[j]);
  }
  line += "],\"loss_mask\":[";
  for (std::size_t j = 0; j < seq.loss_mask.size(); ++j) {
    if (j > 0) line += ',';
    line += seq.loss_mask[j] != 0 ? '1' : '0';
  }
  line += "]}\n";
}

// Before writing anything: the output's directory exists (created if need be) and its disk can
// hold at least the smallest file these options can produce (every token of a line takes at
// least 4 bytes: a digit and a comma for the id and for the mask).
void prepare_output(const SynthOptions& options, const std::filesystem::path& path) {
  const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create its directory {}: {}", path.string(), dir.string(), ec.message());
  const auto space = std::filesystem::space(dir, ec);
  if (ec) fail("{}: cannot read the free space of {}: {}", path.string(), dir.string(), ec.message());
  const long double least = static_cast<long double>(options.num_sequences) *
                            static_cast<long double>(options.min_length) * 4.0L;
  if (least > static_cast<long double>(space.available)) {
    fail("{}: {} sequences of at least {} tokens need at least {:.3g} GiB, but {} has {:.3g} GiB free; lower --num",
         path.string(), options.num_sequences, options.min_length, static_cast<double>(least / (1024.0L * 1024 * 1024)),
         dir.string(), static_cast<double>(space.available) / (1024.0 * 1024 * 1024));
  }
}

}  // namespace

std::vector<SynthSequence> generate_synth(const SynthOptions& options) {
  const SynthStream stream(options);
  std::vector<SynthSequence> out;
  out.reserve(static_cast<std::size_t>(std::min<std::int64_t>(options.num_sequences, 1 << 20)));
  for (std::int64_t i = 0; i < options.num_sequences; ++i) out.push_back(stream.at(i));
  return out;
}

void write_synth_jsonl(const SynthOptions& options, const std::string& path) {
  const SynthStream stream(options);  // validates the options first
  prepare_output(options, path);
  // Written to a sibling temp file and renamed, so a crash never leaves a truncated dataset;
  // generated one sequence at a time, so memory stays flat for any count.
  const std::string temp_path = path + ".tmp";
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot open {} for writing: {}", path, temp_path, std::strerror(errno));
    std::string line;
    for (std::int64_t i = 0; i < options.num_sequences && out; ++i) {
      append_jsonl(stream.at(i), line);
      out << line;
    }
    out.close();
    if (!out) {
      const int err = errno;
      std::error_code ignored;
      std::filesystem::remove(temp_path, ignored);
      fail("{}: writing {} failed: {}", path, temp_path, err != 0 ? std::strerror(err) : "disk full or I/O error");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp_path, path, ec);
  if (ec) fail("{}: cannot rename {} to it: {}", path, temp_path, ec.message());
}

}  // namespace odc::data
