// Key and value types sortd sorts, and the order-preserving bit transforms
// that let one unsigned radix sort handle all of them.
//
// Every key type maps to an unsigned integer of the same width whose
// unsigned order is the key's order:
//   unsigned:  unchanged
//   signed:    flip the sign bit
//   float:     IEEE-754 totalOrder: negative values have all bits flipped,
//              non-negative values get the sign bit set.
// Descending order is the complement of that (~bits), which keeps the sort
// stable: equal keys still come out in input order.
//
//   uint32_t bits = OrderedBits<KeyType::kF32>(raw_bits, /*descending=*/false);
//   uint32_t back = RawBits<KeyType::kF32>(bits, /*descending=*/false);
#ifndef SORTD_CORE_KEYS_H_
#define SORTD_CORE_KEYS_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace sortd {

static_assert(std::endian::native == std::endian::little,
              "sortd's wire format is little-endian and so is its host code");

enum class KeyType { kU32, kI32, kF32, kU64, kI64, kF64 };
enum class ValueType { kNone, kU32, kU64 };
enum class Order { kAscending, kDescending };

inline constexpr KeyType kAllKeyTypes[] = {KeyType::kU32, KeyType::kI32,
                                           KeyType::kF32, KeyType::kU64,
                                           KeyType::kI64, KeyType::kF64};

constexpr size_t KeySize(KeyType t) {
  return (t == KeyType::kU32 || t == KeyType::kI32 || t == KeyType::kF32) ? 4
                                                                          : 8;
}

constexpr size_t ValueSize(ValueType t) {
  return t == ValueType::kNone ? 0 : (t == ValueType::kU32 ? 4 : 8);
}

// Short lowercase name as used on the command line and in metrics labels.
constexpr const char* KeyTypeName(KeyType t) {
  switch (t) {
    case KeyType::kU32:
      return "u32";
    case KeyType::kI32:
      return "i32";
    case KeyType::kF32:
      return "f32";
    case KeyType::kU64:
      return "u64";
    case KeyType::kI64:
      return "i64";
    case KeyType::kF64:
      return "f64";
  }
  return "?";
}

constexpr const char* ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kNone:
      return "none";
    case ValueType::kU32:
      return "u32";
    case ValueType::kU64:
      return "u64";
  }
  return "?";
}

// The unsigned integer that carries a key type's bits.
template <KeyType T>
using KeyBits = std::conditional_t<KeySize(T) == 4, uint32_t, uint64_t>;

// The C++ type of a key type's values: KeyCType<KeyType::kF32> is float.
template <KeyType T>
using KeyCType = std::conditional_t<
    T == KeyType::kU32, uint32_t,
    std::conditional_t<
        T == KeyType::kI32, int32_t,
        std::conditional_t<
            T == KeyType::kF32, float,
            std::conditional_t<
                T == KeyType::kU64, uint64_t,
                std::conditional_t<T == KeyType::kI64, int64_t, double>>>>>;

template <KeyType T>
constexpr bool kIsSigned = T == KeyType::kI32 || T == KeyType::kI64;
template <KeyType T>
constexpr bool kIsFloat = T == KeyType::kF32 || T == KeyType::kF64;

// Maps a key's raw bits to bits whose unsigned order is the requested order.
template <KeyType T>
constexpr KeyBits<T> OrderedBits(KeyBits<T> raw, bool descending) {
  using U = KeyBits<T>;
  constexpr U kSign = U{1} << (sizeof(U) * 8 - 1);
  U bits = raw;
  if constexpr (kIsSigned<T>) {
    bits ^= kSign;
  } else if constexpr (kIsFloat<T>) {
    bits = (raw & kSign) ? static_cast<U>(~raw) : static_cast<U>(raw | kSign);
  }
  return descending ? static_cast<U>(~bits) : bits;
}

// Inverse of OrderedBits.
template <KeyType T>
constexpr KeyBits<T> RawBits(KeyBits<T> ordered, bool descending) {
  using U = KeyBits<T>;
  constexpr U kSign = U{1} << (sizeof(U) * 8 - 1);
  U bits = descending ? static_cast<U>(~ordered) : ordered;
  if constexpr (kIsSigned<T>) {
    return bits ^ kSign;
  } else if constexpr (kIsFloat<T>) {
    return (bits & kSign) ? static_cast<U>(bits & ~kSign)
                          : static_cast<U>(~bits);
  } else {
    return bits;
  }
}

// Calls f.template operator()<T>() with T the compile-time KeyType equal to
// `t`; the way runtime types reach templated code.
template <typename F>
decltype(auto) DispatchKeyType(KeyType t, F&& f) {
  switch (t) {
    case KeyType::kU32:
      return f.template operator()<KeyType::kU32>();
    case KeyType::kI32:
      return f.template operator()<KeyType::kI32>();
    case KeyType::kF32:
      return f.template operator()<KeyType::kF32>();
    case KeyType::kU64:
      return f.template operator()<KeyType::kU64>();
    case KeyType::kI64:
      return f.template operator()<KeyType::kI64>();
    case KeyType::kF64:
      break;
  }
  return f.template operator()<KeyType::kF64>();
}

}  // namespace sortd

#endif  // SORTD_CORE_KEYS_H_
