#include "core/compact_keys.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sortd::compact {
namespace {

constexpr size_t kLanes = 4;
constexpr size_t kSlots = kBlockKeys / kLanes;  // differences per lane

template <KeyType T>
void MapInPlace(bool descending, bool to_order, uint32_t* keys, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    keys[i] = to_order ? OrderedBits<T>(keys[i], descending)
                       : RawBits<T>(keys[i], descending);
  }
}

void Map(KeyType type, bool descending, bool to_order, uint32_t* keys,
         size_t n) {
  switch (type) {
    case KeyType::kU32:
      if (descending) MapInPlace<KeyType::kU32>(true, to_order, keys, n);
      return;
    case KeyType::kI32:
      return MapInPlace<KeyType::kI32>(descending, to_order, keys, n);
    case KeyType::kF32:
      return MapInPlace<KeyType::kF32>(descending, to_order, keys, n);
    default:
      return;  // 64-bit keys have no compact form
  }
}

// The differences of one block: d[0] = 0, d[j] = v[j] - v[j - 1], zero
// past the end of the array.
void Differences(const uint32_t* __restrict values, size_t count, size_t block,
                 uint32_t* __restrict d) {
  const size_t begin = block * kBlockKeys;
  const size_t n = std::min(kBlockKeys, count - begin);
  const uint32_t* v = values + begin;
  d[0] = 0;
  if (n == kBlockKeys) {
    for (size_t j = 1; j < kBlockKeys; ++j) d[j] = v[j] - v[j - 1];
    return;
  }
  for (size_t j = 1; j < n; ++j) d[j] = v[j] - v[j - 1];
  for (size_t j = std::max<size_t>(n, 1); j < kBlockKeys; ++j) d[j] = 0;
}

uint8_t Width(const uint32_t* d) {
  uint32_t any = 0;
  for (size_t j = 0; j < kBlockKeys; ++j) any |= d[j];
  return static_cast<uint8_t>(std::bit_width(any));
}

// Packs 128 differences of width B into 4 * B words, lanes interleaved.
// Unrolled with B known, every shift is a constant and each step of the
// four lanes is one vector operation.
template <int B>
void Pack(const uint32_t* d, uint32_t* out) {
  if constexpr (B > 0) {
    uint32_t acc[kLanes] = {};
#pragma GCC unroll 32
    for (size_t s = 0; s < kSlots; ++s) {
      const size_t bit = s * B, shift = bit % 32, word = bit / 32;
      for (size_t l = 0; l < kLanes; ++l) acc[l] |= d[s * kLanes + l] << shift;
      if (shift + B >= 32) {
        for (size_t l = 0; l < kLanes; ++l) {
          out[word * kLanes + l] = acc[l];
          acc[l] = shift + B > 32 ? d[s * kLanes + l] >> (32 - shift) : 0;
        }
      }
    }
  }
}

template <int B>
void Unpack(const uint32_t* in, uint32_t* d) {
  if constexpr (B == 0) {
    std::fill(d, d + kBlockKeys, 0u);
  } else {
    constexpr uint32_t kMask = B == 32 ? ~0u : (1u << B) - 1;
#pragma GCC unroll 32
    for (size_t s = 0; s < kSlots; ++s) {
      const size_t bit = s * B, shift = bit % 32, word = bit / 32;
      for (size_t l = 0; l < kLanes; ++l) {
        uint32_t v = in[word * kLanes + l] >> shift;
        if (shift + B > 32) v |= in[(word + 1) * kLanes + l] << (32 - shift);
        d[s * kLanes + l] = v & kMask;
      }
    }
  }
}

// In place, d[j] = d[0] + ... + d[j]: four quarters summed side by side
// (four independent chains rather than one of 128 additions), then each
// quarter offset by the ones before it.
void PrefixSum(uint32_t* __restrict d) {
  constexpr size_t kQuarter = kBlockKeys / 4;
  for (size_t j = 1; j < kQuarter; ++j) {
    for (size_t q = 0; q < 4; ++q)
      d[q * kQuarter + j] += d[q * kQuarter + j - 1];
  }
  for (size_t q = 1; q < 4; ++q) {
    const uint32_t carry = d[q * kQuarter - 1];
    for (size_t j = 0; j < kQuarter; ++j) d[q * kQuarter + j] += carry;
  }
}

using PackFn = void (*)(const uint32_t*, uint32_t*);
using UnpackFn = void (*)(const uint32_t*, uint32_t*);

template <int... B>
constexpr auto PackTable(std::integer_sequence<int, B...>) {
  return std::array<PackFn, sizeof...(B)>{&Pack<B>...};
}
template <int... B>
constexpr auto UnpackTable(std::integer_sequence<int, B...>) {
  return std::array<UnpackFn, sizeof...(B)>{&Unpack<B>...};
}
constexpr auto kPack = PackTable(std::make_integer_sequence<int, 33>{});
constexpr auto kUnpack = UnpackTable(std::make_integer_sequence<int, 33>{});

}  // namespace

void ToOrderValues(KeyType type, bool descending, uint32_t* keys,
                   size_t count) {
  Map(type, descending, /*to_order=*/true, keys, count);
}

void FromOrderValues(KeyType type, bool descending, uint32_t* values,
                     size_t count) {
  Map(type, descending, /*to_order=*/false, values, count);
}

size_t DeltaBytes(const uint8_t* widths, size_t first, size_t last) {
  size_t words = 0;
  for (size_t b = first; b < last; ++b) words += widths[b];
  return words * kLanes * 4;
}

size_t EncodeBlocks(const uint32_t* values, size_t count, size_t first,
                    size_t last, uint8_t* widths, uint32_t* bases,
                    uint8_t* deltas) {
  alignas(16) uint32_t d[kBlockKeys];
  alignas(16) uint32_t packed[kBlockKeys];
  uint8_t* at = deltas;
  for (size_t b = first; b < last; ++b) {
    Differences(values, count, b, d);
    const uint8_t width = Width(d);
    widths[b] = width;
    bases[b] = values[b * kBlockKeys];
    kPack[width](d, packed);
    const size_t bytes = size_t{width} * kLanes * 4;
    std::memcpy(at, packed, bytes);
    at += bytes;
  }
  return static_cast<size_t>(at - deltas);
}

absl::Status Check(const Encoded& e) {
  const size_t blocks = Blocks(e.count);
  if (e.widths.size() != blocks || e.bases.size() != blocks * 4) {
    return absl::DataLossError(
        absl::StrCat("compact keys: ", e.count, " keys need ", blocks,
                     " widths and ", blocks * 4, " bytes of bases; got ",
                     e.widths.size(), " and ", e.bases.size()));
  }
  const auto* widths = reinterpret_cast<const uint8_t*>(e.widths.data());
  if (const uint8_t* wide = std::find_if(widths, widths + blocks,
                                         [](uint8_t w) { return w > 32; });
      wide != widths + blocks) {
    return absl::DataLossError(absl::StrCat("compact keys: block ",
                                            wide - widths, " has width ",
                                            int{*wide}, " (at most 32)"));
  }
  if (const size_t want = DeltaBytes(widths, 0, blocks);
      e.deltas.size() != want) {
    return absl::DataLossError(absl::StrCat("compact keys: the widths need ",
                                            want, " bytes of differences; got ",
                                            e.deltas.size()));
  }
  return absl::OkStatus();
}

void UnpackBlocks(const Encoded& e, size_t first, size_t last,
                  size_t deltas_offset, uint32_t* out) {
  alignas(16) uint32_t packed[kBlockKeys];
  alignas(16) uint32_t d[kBlockKeys];
  const auto* widths = reinterpret_cast<const uint8_t*>(e.widths.data());
  const char* deltas = e.deltas.data() + deltas_offset;
  for (size_t b = first; b < last; ++b) {
    const size_t bytes = size_t{widths[b]} * kLanes * 4;
    std::memcpy(packed, deltas, bytes);
    deltas += bytes;
    kUnpack[widths[b]](packed, d);
    uint32_t base;
    std::memcpy(&base, e.bases.data() + b * 4, 4);
    d[0] = base;
    PrefixSum(d);
    const size_t begin = b * kBlockKeys;
    const size_t n = std::min(kBlockKeys, e.count - begin);
    std::memcpy(out + begin, d, n * 4);
  }
}

}  // namespace sortd::compact
