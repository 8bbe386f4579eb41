// sortd.proto's key fields and the key types they carry, in one place for
// the server, the clients and the tests. SortRequest and SortResponse
// number their raw key fields alike, in KeyType's order (1-6: u32, i32,
// f32, u64, i64, f64), and name their accessors alike; SortResponse's
// compact 32-bit keys are fields 12-14 (u32, i32, f32). The message helpers
// are templates over the generated classes (checked against their field
// numbers at compile time), so this header needs no generated code itself.
//
//   const std::string* keys = key_fields::Keys(request);   // null: none
//   std::optional<KeyType> type = key_fields::TypeOf(request);
//   key_fields::MutableKeys(&response, KeyType::kF32)->assign(bytes);
//   int field = key_fields::Raw<float>();                  // 3
#ifndef SORTD_CORE_KEY_FIELDS_H_
#define SORTD_CORE_KEY_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "core/keys.h"

namespace sortd::key_fields {

// The raw key field of `type`.
constexpr int Raw(KeyType type) { return static_cast<int>(type) + 1; }
// The key type raw key field `field` carries; none for other fields.
constexpr std::optional<KeyType> TypeOfRaw(int field) {
  if (field < 1 || field > 6) return std::nullopt;
  return static_cast<KeyType>(field - 1);
}
// The compact key field of a 32-bit `type`; 0 for 64-bit types.
constexpr int Compact(KeyType type) {
  return KeySize(type) == 4 ? 12 + static_cast<int>(type) : 0;
}
constexpr std::optional<KeyType> TypeOfCompact(int field) {
  if (field < 12 || field > 14) return std::nullopt;
  return static_cast<KeyType>(field - 12);
}

// The key type of a C++ key type: TypeOf<float>() is KeyType::kF32.
template <typename K>
constexpr KeyType TypeOf() {
  if constexpr (std::is_same_v<K, uint32_t>) {
    return KeyType::kU32;
  } else if constexpr (std::is_same_v<K, int32_t>) {
    return KeyType::kI32;
  } else if constexpr (std::is_same_v<K, float>) {
    return KeyType::kF32;
  } else if constexpr (std::is_same_v<K, uint64_t>) {
    return KeyType::kU64;
  } else if constexpr (std::is_same_v<K, int64_t>) {
    return KeyType::kI64;
  } else {
    static_assert(std::is_same_v<K, double>, "not a sortd key type");
    return KeyType::kF64;
  }
}
template <typename K>
constexpr int Raw() {
  return Raw(TypeOf<K>());
}

template <typename Message>
constexpr void CheckNumbers() {
  static_assert(Message::kU32KeysFieldNumber == Raw(KeyType::kU32) &&
                Message::kI32KeysFieldNumber == Raw(KeyType::kI32) &&
                Message::kF32KeysFieldNumber == Raw(KeyType::kF32) &&
                Message::kU64KeysFieldNumber == Raw(KeyType::kU64) &&
                Message::kI64KeysFieldNumber == Raw(KeyType::kI64) &&
                Message::kF64KeysFieldNumber == Raw(KeyType::kF64));
}

// The type of the raw keys a request or response holds; none when its
// key field is unset or compact.
template <typename Message>
std::optional<KeyType> TypeOf(const Message& m) {
  CheckNumbers<Message>();
  return TypeOfRaw(static_cast<int>(m.keys_case()));
}

// The raw key bytes of a request or response; null when it holds none.
template <typename Message>
const std::string* Keys(const Message& m) {
  const std::optional<KeyType> type = TypeOf(m);
  if (!type) return nullptr;
  switch (*type) {
    case KeyType::kU32:
      return &m.u32_keys();
    case KeyType::kI32:
      return &m.i32_keys();
    case KeyType::kF32:
      return &m.f32_keys();
    case KeyType::kU64:
      return &m.u64_keys();
    case KeyType::kI64:
      return &m.i64_keys();
    case KeyType::kF64:
      break;
  }
  return &m.f64_keys();
}

// Sets the key field of `type` (clearing any other) and returns it.
template <typename Message>
std::string* MutableKeys(Message* m, KeyType type) {
  CheckNumbers<Message>();
  switch (type) {
    case KeyType::kU32:
      return m->mutable_u32_keys();
    case KeyType::kI32:
      return m->mutable_i32_keys();
    case KeyType::kF32:
      return m->mutable_f32_keys();
    case KeyType::kU64:
      return m->mutable_u64_keys();
    case KeyType::kI64:
      return m->mutable_i64_keys();
    case KeyType::kF64:
      break;
  }
  return m->mutable_f64_keys();
}

// A response's compact keys and their type; null when it holds none.
template <typename Response>
auto CompactKeys(const Response& r, KeyType* type)
    -> decltype(&r.compact_u32_keys()) {
  static_assert(
      Response::kCompactU32KeysFieldNumber == Compact(KeyType::kU32) &&
      Response::kCompactI32KeysFieldNumber == Compact(KeyType::kI32) &&
      Response::kCompactF32KeysFieldNumber == Compact(KeyType::kF32));
  const std::optional<KeyType> t =
      TypeOfCompact(static_cast<int>(r.keys_case()));
  if (!t) return nullptr;
  if (type != nullptr) *type = *t;
  return *t == KeyType::kU32   ? &r.compact_u32_keys()
         : *t == KeyType::kI32 ? &r.compact_i32_keys()
                               : &r.compact_f32_keys();
}

}  // namespace sortd::key_fields

#endif  // SORTD_CORE_KEY_FIELDS_H_
