#include "odc/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"

namespace odc::io {

// Tensor bytes are copied as they sit in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// The Hugging Face reference implementation refuses headers above 100 MB; a larger value is a
// corrupted length field, not a real header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<std::uint64_t>(p[i]);
  return value;
}

// Parses a JSON array of exactly `count` (or any, when count < 0) non-negative integers.
std::vector<std::uint64_t> parse_uint_array(const nlohmann::json& value, long count,
                                            const std::string& what) {
  if (!value.is_array()) fail("{}: expected an array of non-negative integers, found {}", what, value.dump());
  if (count >= 0 && value.size() != static_cast<std::size_t>(count)) {
    fail("{}: expected {} entries, found {}", what, count, value.dump());
  }
  std::vector<std::uint64_t> out;
  out.reserve(value.size());
  for (const auto& element : value) {
    // nlohmann stores non-negative literals as unsigned; a negative one is number_integer.
    if (!element.is_number_unsigned()) {
      fail("{}: expected non-negative integers, found {}", what, value.dump());
    }
    out.push_back(element.get<std::uint64_t>());
  }
  return out;
}

}  // namespace

std::string_view safetensors_dtype_code(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::i64: return "I64";
  }
  fail("dtype {} has no safetensors code", static_cast<int>(dtype));
}

DType safetensors_dtype_from_code(std::string_view code) {
  if (code == "F32") return DType::f32;
  if (code == "BF16") return DType::bf16;
  if (code == "F16") return DType::f16;
  if (code == "F64") return DType::f64;
  if (code == "I32") return DType::i32;
  if (code == "U32") return DType::u32;
  if (code == "I64") return DType::i64;
  fail("unsupported dtype '{}': expected one of F32, BF16, F16, F64, I32, U32, I64", code);
}

void SafetensorsFile::Unmap::operator()(std::byte* base) const noexcept {
  if (base != nullptr) ::munmap(base, size);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("safetensors file '{}': cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("safetensors file '{}': cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("safetensors file '{}': not a regular file", path);
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < 8) {
    fail("safetensors file '{}': truncated: {} bytes, expected at least the 8-byte header length",
         path, file_size);
  }
  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (base == MAP_FAILED) fail("safetensors file '{}': mmap failed: {}", path, std::strerror(errno));
  mapping_ = std::unique_ptr<std::byte, Unmap>(static_cast<std::byte*>(base), Unmap{file_size});
  parse({mapping_.get(), file_size});
}

SafetensorsFile::SafetensorsFile(std::vector<std::byte> contents, std::string name)
    : path_(std::move(name)), contents_(std::move(contents)) {
  parse(contents_);
}

void SafetensorsFile::parse(std::span<const std::byte> file) {
  const std::string& path = path_;
  const std::uint64_t file_size = file.size();
  if (file_size < 8) {
    fail("safetensors file '{}': truncated: {} bytes, expected at least the 8-byte header length",
         path, file_size);
  }
  const std::byte* bytes = file.data();

  const std::uint64_t header_len = read_le64(bytes);
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    fail("safetensors file '{}': header length {} exceeds the file ({} bytes after the length "
         "field; limit {}): truncated or not a safetensors file",
         path, header_len, file_size - 8, kMaxHeaderBytes);
  }
  const std::uint64_t data_size = file_size - 8 - header_len;
  data_start_ = 8 + header_len;
  const std::byte* data = bytes + 8 + header_len;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes + 8),
                                   reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    fail("safetensors file '{}': header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail("safetensors file '{}': header is not a JSON object", path);

  struct Span {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == kSafetensorsMetadataKey) {
      if (!entry.is_object()) fail("safetensors file '{}': __metadata__ is not an object", path);
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          fail("safetensors file '{}': __metadata__ value of '{}' is not a string", path, key);
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = fmt::format("safetensors file '{}': tensor '{}'", path, name);
    if (!entry.is_object()) fail("{}: entry is not a JSON object", where);
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) fail("{}: missing '{}'", where, key);
    }
    if (!entry["dtype"].is_string()) fail("{}: dtype is not a string", where);
    SafetensorsTensorInfo info;
    try {
      info.dtype = safetensors_dtype_from_code(entry["dtype"].get<std::string>());
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
    // Element count with overflow checks: a corrupt shape must not wrap around to a small size.
    std::uint64_t numel = 1;
    for (std::uint64_t d : parse_uint_array(entry["shape"], -1, where + ": shape")) {
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (d != 0 && numel > std::numeric_limits<std::uint64_t>::max() / 8 / d)) {
        fail("{}: shape {} is too large", where, entry["shape"].dump());
      }
      numel *= d;
      info.shape.push_back(static_cast<std::int64_t>(d));
    }
    const auto offsets = parse_uint_array(entry["data_offsets"], 2, where + ": data_offsets");
    info.begin = offsets[0];
    info.end = offsets[1];
    if (info.begin > info.end) {
      fail("{}: data_offsets [{}, {}] has begin after end", where, info.begin, info.end);
    }
    const std::uint64_t expected = numel * dtype_size(info.dtype);
    if (info.end - info.begin != expected) {
      fail("{}: data_offsets [{}, {}] span {} bytes but shape {} of {} needs {} bytes", where,
           info.begin, info.end, info.end - info.begin, shape_str(info.shape),
           safetensors_dtype_code(info.dtype), expected);
    }
    if (info.end > data_size) {
      fail("{}: data_offsets [{}, {}] out of range: the data region has {} bytes (truncated file?)",
           where, info.begin, info.end, data_size);
    }
    info.bytes = std::span<const std::byte>(data + info.begin, info.end - info.begin);
    spans.push_back({info.begin, info.end, name});
    tensors_.emplace(name, std::move(info));
  }

  // Overlapping tensors would alias each other's bytes: a corrupted or hand-edited header.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    const Span& prev = spans[i - 1];
    const Span& cur = spans[i];
    // Empty tensors occupy no bytes and cannot overlap anything.
    if (cur.begin == cur.end || prev.begin == prev.end) continue;
    if (cur.begin < prev.end) {
      fail("safetensors file '{}': tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]",
           path, cur.name, cur.begin, cur.end, prev.name, prev.begin, prev.end);
    }
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::pair<std::uint64_t, std::string>> order;
  order.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) order.emplace_back(info.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  out.reserve(order.size());
  for (auto& entry : order) out.push_back(std::move(entry.second));
  return out;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    fail("safetensors file '{}': no tensor '{}' ({} tensors present)", path_, name, tensors_.size());
  }
  return it->second;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name,
                                             std::int64_t expected_numel) const {
  const SafetensorsTensorInfo& t = info(name);
  const std::int64_t n = t.numel();
  if (expected_numel >= 0 && n != expected_numel) {
    fail("safetensors file '{}': tensor '{}' has shape {} ({} elements), expected {} elements",
         path_, name, shape_str(t.shape), n, expected_numel);
  }
  std::vector<float> out(static_cast<std::size_t>(n));
  read_f32_range(name, 0, n, out.data());
  return out;
}

namespace {

// Elements converted between two releases of the mapping's pages: the pages a read holds at once.
constexpr std::int64_t kReadPieceElements = std::int64_t{1} << 22;

}  // namespace

void SafetensorsFile::read_f32_range(const std::string& name, std::int64_t begin,
                                     std::int64_t count, float* out) const {
  const SafetensorsTensorInfo& t = info(name);
  const std::int64_t n = t.numel();
  if (begin < 0 || count < 0 || begin > n || count > n - begin) {
    fail("safetensors file '{}': tensor '{}' has {} elements, cannot read [{}, {})", path_, name, n,
         begin, begin + count);
  }
  const std::size_t size = dtype_size(t.dtype);
  const std::byte* first = t.bytes.data() + static_cast<std::size_t>(begin) * size;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  // The whole pages of the range not yet released (pages the range shares with its neighbours stay).
  auto released = (reinterpret_cast<std::uintptr_t>(first) + page - 1) / page * page;
  std::int64_t done = 0;
  do {  // at least once: an empty range of a tensor that is not floating-point is refused too
    const std::int64_t piece = std::min(kReadPieceElements, count - done);
    const std::byte* src = first + static_cast<std::size_t>(done) * size;
    convert_to_f32(t.dtype, name, src, piece, out + done);
    done += piece;
    if (!mapping_) continue;
    // What was converted leaves this process's resident set (it stays in the page cache): a load
    // holds the weights once, in its buffers, not also the file's pages.
    const auto end = (reinterpret_cast<std::uintptr_t>(src + static_cast<std::size_t>(piece) * size)) / page * page;
    if (end > released) {
      ::madvise(reinterpret_cast<void*>(released), end - released, MADV_DONTNEED);
      released = end;
    }
  } while (done < count);
}

void SafetensorsFile::convert_to_f32(DType dtype, const std::string& name, const std::byte* src, std::int64_t count,
                                     float* out) const {
  // memcpy per element: tensors inside the mapping need not be aligned for their type.
  switch (dtype) {
    case DType::f32:
      if (count > 0) std::memcpy(out, src, static_cast<std::size_t>(count) * 4);
      break;
    case DType::f64:
      for (std::int64_t i = 0; i < count; ++i) {
        double v;
        std::memcpy(&v, src + i * 8, 8);
        out[i] = static_cast<float>(v);
      }
      break;
    case DType::bf16:
    case DType::f16:
      for (std::int64_t i = 0; i < count; ++i) {
        std::uint16_t v;
        std::memcpy(&v, src + i * 2, 2);
        out[i] = dtype == DType::bf16 ? bf16_to_f32(v) : f16_to_f32(v);
      }
      break;
    default:
      fail("safetensors file '{}': tensor '{}' has dtype {}, expected a floating-point type", path_,
           name, safetensors_dtype_code(dtype));
  }
}

}  // namespace odc::io
