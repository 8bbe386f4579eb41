#include "client/sortctl_lib.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/key_fields.h"
#include "core/reference_sort.h"

namespace sortd::cli {
namespace {

template <typename T>
T LoadAt(const std::string& bytes, size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' ||
         c == '\v';
}

// Calls parse(token) for each whitespace-separated token.
template <typename F>
absl::Status ForEachToken(std::string_view text, F parse) {
  size_t i = 0;
  size_t index = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    if (start == i) break;
    std::string_view token = text.substr(start, i - start);
    if (!parse(token)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "number ", index + 1, " (\"", std::string(token.substr(0, 40)),
          "\") is not a valid value of the requested type"));
    }
    ++index;
  }
  return absl::OkStatus();
}

template <typename V>
bool ParseOne(std::string_view token, V* v) {
  if (!token.empty() && token[0] == '+') token.remove_prefix(1);
  const char* end = token.data() + token.size();
  std::from_chars_result r;
  if constexpr (std::is_integral_v<V>) {
    int base = 10;
    bool negative = false;
    std::string_view digits = token;
    if (std::is_signed_v<V> && !digits.empty() && digits[0] == '-') {
      negative = true;
      digits.remove_prefix(1);
    }
    if (digits.size() > 2 && digits[0] == '0' &&
        (digits[1] == 'x' || digits[1] == 'X')) {
      base = 16;
      digits.remove_prefix(2);
      if (negative) return false;  // hex is for bit patterns
    }
    if (negative) {
      r = std::from_chars(token.data(), end, *v, 10);
    } else {
      r = std::from_chars(digits.data(), end, *v, base);
    }
  } else {
    r = std::from_chars(token.data(), end, *v);
  }
  return r.ec == std::errc() && r.ptr == end;
}

template <KeyType T>
absl::StatusOr<std::string> ParseTyped(std::string_view text) {
  std::string out;
  absl::Status s = ForEachToken(text, [&](std::string_view token) {
    KeyCType<T> v;
    if (!ParseOne(token, &v)) return false;
    Append(&out, v);
    return true;
  });
  if (!s.ok()) return s;
  return out;
}

// The reference permutation (core/reference_sort.h) of little-endian keys.
template <KeyType T>
std::vector<uint32_t> ReferencePermutation(const std::string& bytes,
                                           bool descending) {
  using V = KeyCType<T>;
  std::vector<V> keys(bytes.size() / sizeof(V));
  if (!keys.empty())
    std::memcpy(keys.data(), bytes.data(), keys.size() * sizeof(V));
  return StablePermutation(keys.data(), keys.size(), descending);
}

template <typename T>
absl::Status CheckGathered(const char* what, const std::string& in,
                           const std::string& out,
                           const std::vector<uint32_t>& perm) {
  if (out.size() != in.size()) {
    return absl::DataLossError(absl::StrCat(what, ": expected ", in.size(),
                                            " bytes, got ", out.size()));
  }
  for (size_t i = 0; i < perm.size(); ++i) {
    T want = LoadAt<T>(in, perm[i]);
    T got = LoadAt<T>(out, i);
    if (std::memcmp(&want, &got, sizeof(T)) != 0) {
      return absl::DataLossError(
          absl::StrCat(what, " differ at position ", i,
                       ": expected the element from input "
                       "index ",
                       perm[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<KeyType> ParseKeyTypeName(std::string_view name) {
  for (KeyType t : kAllKeyTypes) {
    if (name == KeyTypeName(t)) return t;
  }
  return std::nullopt;
}

std::optional<ValueType> ParseValueTypeName(std::string_view name) {
  if (name == "u32") return ValueType::kU32;
  if (name == "u64") return ValueType::kU64;
  if (name.empty() || name == "none") return ValueType::kNone;
  return std::nullopt;
}

absl::StatusOr<std::string> ParseKeys(KeyType type, std::string_view text) {
  return DispatchKeyType(type,
                         [&]<KeyType T>() { return ParseTyped<T>(text); });
}

absl::StatusOr<std::string> ParseWords(std::string_view text) {
  return ParseTyped<KeyType::kU32>(text);
}

std::string RandomKeys(KeyType type, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(count * KeySize(type));
  DispatchKeyType(type, [&]<KeyType T>() {
    using V = KeyCType<T>;
    for (size_t i = 0; i < count; ++i) {
      uint64_t r = rng();
      V v;
      if (i > 0 && r % 8 == 0) {
        v = LoadAt<V>(out, i - 1 - (r >> 8) % std::min<size_t>(i, 16));
      } else if constexpr (std::is_floating_point_v<V>) {
        switch (r % 97) {
          case 0:
            v = std::numeric_limits<V>::quiet_NaN();
            break;
          case 1:
            v = -std::numeric_limits<V>::quiet_NaN();
            break;
          case 2:
            v = std::numeric_limits<V>::infinity();
            break;
          case 3:
            v = -std::numeric_limits<V>::infinity();
            break;
          case 4:
            v = V(0);
            break;
          case 5:
            v = -V(0);
            break;
          default:
            v = static_cast<V>((static_cast<double>(r >> 11) * 0x1p-53 - 0.5) *
                               2e6);
        }
      } else {
        v = static_cast<V>(r);
      }
      Append(&out, v);
    }
  });
  return out;
}

std::string RandomValues(ValueType type, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::string out;
  out.reserve(count * ValueSize(type));
  for (size_t i = 0; i < count; ++i) {
    if (type == ValueType::kU32) Append(&out, static_cast<uint32_t>(rng()));
    if (type == ValueType::kU64) Append(&out, static_cast<uint64_t>(rng()));
  }
  return out;
}

std::string RandomWords(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  out.reserve(count * 4);
  for (size_t i = 0; i < count; ++i) Append(&out, static_cast<uint32_t>(rng()));
  return out;
}

void SetKeys(KeyType type, std::string bytes, v1::SortRequest* r) {
  *key_fields::MutableKeys(r, type) = std::move(bytes);
}

KeyType KeysOf(const v1::SortRequest& r, const std::string** bytes) {
  static const std::string kNone;
  const std::string* keys = key_fields::Keys(r);
  *bytes = keys != nullptr ? keys : &kNone;
  return key_fields::TypeOf(r).value_or(KeyType::kU32);
}

const std::string& KeysOf(const v1::SortResponse& r) {
  static const std::string kNone;
  const std::string* keys = key_fields::Keys(r);
  return keys != nullptr ? *keys : kNone;
}

std::string FormatKey(KeyType type, const std::string& bytes, size_t i) {
  return DispatchKeyType(type, [&]<KeyType T>() {
    char buf[64];
    auto r =
        std::to_chars(buf, buf + sizeof(buf), LoadAt<KeyCType<T>>(bytes, i));
    return std::string(buf, r.ptr);
  });
}

absl::Status VerifySort(const v1::SortRequest& request,
                        const v1::SortResponse& response) {
  const std::string* keys = nullptr;
  const KeyType type = KeysOf(request, &keys);
  if (static_cast<int>(response.keys_case()) !=
      static_cast<int>(request.keys_case())) {
    return absl::DataLossError(
        "the answer's keys are not of the request's type");
  }
  const bool descending = request.order() == v1::ORDER_DESCENDING;
  const std::vector<uint32_t> perm = DispatchKeyType(type, [&]<KeyType T>() {
    return ReferencePermutation<T>(*keys, descending);
  });
  absl::Status s = DispatchKeyType(type, [&]<KeyType T>() {
    return CheckGathered<KeyCType<T>>("keys", *keys, KeysOf(response), perm);
  });
  if (!s.ok()) return s;
  if (request.has_u32_values()) {
    s = CheckGathered<uint32_t>("values", request.u32_values(),
                                response.u32_values(), perm);
  } else if (request.has_u64_values()) {
    s = CheckGathered<uint64_t>("values", request.u64_values(),
                                response.u64_values(), perm);
  } else if (response.values_case() != v1::SortResponse::VALUES_NOT_SET) {
    s = absl::DataLossError("the answer has values the request did not send");
  }
  if (!s.ok()) return s;
  if (request.return_permutation()) {
    if (response.permutation().size() != perm.size() * 4) {
      return absl::DataLossError("the permutation has the wrong length");
    }
    for (size_t i = 0; i < perm.size(); ++i) {
      if (LoadAt<uint32_t>(response.permutation(), i) != perm[i]) {
        return absl::DataLossError(absl::StrCat(
            "permutation differs at position ", i, ": expected ", perm[i],
            ", got ", LoadAt<uint32_t>(response.permutation(), i)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyTranspose(const std::string& in, const std::string& out) {
  if (in.size() != out.size()) {
    return absl::DataLossError(
        absl::StrCat("expected ", in.size(), " bytes, got ", out.size()));
  }
  for (size_t m = 0; m < in.size() / 128; ++m) {
    for (size_t i = 0; i < 32; ++i) {
      const uint32_t row_in = LoadAt<uint32_t>(in, m * 32 + i);
      for (size_t j = 0; j < 32; ++j) {
        const uint32_t bit_out = (LoadAt<uint32_t>(out, m * 32 + j) >> i) & 1;
        if (((row_in >> j) & 1) != bit_out) {
          return absl::DataLossError(
              absl::StrCat("matrix ", m, ": bit ", j, " of row ", i,
                           " is not bit ", i, " of row ", j, " in the answer"));
        }
      }
    }
  }
  return absl::OkStatus();
}

const char* PathText(v1::ExecutionPath path) {
  switch (path) {
    case v1::EXECUTION_PATH_CPU:
      return "cpu";
    case v1::EXECUTION_PATH_GPU:
      return "gpu";
    case v1::EXECUTION_PATH_OPENCL_CPU:
      return "opencl-cpu";
    default:
      return "unknown";
  }
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::optional<std::string> TunablesWithHugePages(const char* current) {
  constexpr char kHugePages[] = "glibc.malloc.hugetlb=";
  if (current == nullptr || *current == '\0') {
    return absl::StrCat(kHugePages, "1");
  }
  // Tunables are name=value pairs joined by ':'.
  for (absl::string_view pair : absl::StrSplit(current, ':')) {
    if (absl::StartsWith(pair, kHugePages)) return std::nullopt;
  }
  return absl::StrCat(current, ":", kHugePages, "1");
}

}  // namespace sortd::cli
