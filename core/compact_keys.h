// Compact keys: a lossless form of sorted 32-bit keys for responses, about
// a third of their raw size when the keys are spread evenly.
//
// Keys in sort order, mapped to their order values (OrderedBits: unsigned
// bits that ascend in the sort's order, whatever the key type and order),
// differ from their neighbours by small amounts: 16M random u32 keys by
// about 256. The form cuts the array into blocks of kBlockKeys keys. A
// block keeps its first order value whole (its base) and the differences
// of its other values from their predecessors, bit-packed at the width of
// the block's widest difference. The differences sit in four interleaved
// lanes (difference j in lane j % 4), each lane's 32 differences packed
// low bits first into `width` little-endian 32-bit words, and word w of
// lane l stored as word 4w + l of the block: packing and unpacking then run
// four lanes at a time in vector registers. A block of width w takes
// 16 * w bytes; a short last block is padded with zero differences.
//
// Any sequence round-trips exactly (differences wrap modulo 2^32); only
// its size depends on the keys being sorted.
//
// Blocks are independent, so ranges of them are encoded and decoded on
// separate threads:
//
//   // keys: n u32 keys in sort order; turned into order values in place
//   compact::ToOrderValues(KeyType::kU32, /*descending=*/false, keys, n);
//   const size_t blocks = compact::Blocks(n);
//   std::vector<uint8_t> widths(blocks), deltas(n * 4);
//   std::vector<uint32_t> bases(blocks);
//   deltas.resize(compact::EncodeBlocks(keys, n, 0, blocks, widths.data(),
//                                       bases.data(), deltas.data()));
//   ...
//   compact::Encoded e{n, widths, bases, deltas};      // views
//   absl::Status ok = compact::Check(e);               // before decoding
//   compact::UnpackBlocks(e, 0, blocks, 0, out);       // order values
//   compact::FromOrderValues(KeyType::kU32, false, out, n);
#ifndef SORTD_CORE_COMPACT_KEYS_H_
#define SORTD_CORE_COMPACT_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/keys.h"

namespace sortd::compact {

inline constexpr size_t kBlockKeys = 128;

constexpr size_t Blocks(size_t count) {
  return count / kBlockKeys + (count % kBlockKeys != 0);
}

// Whether keys of `type` have a compact form (the 32-bit ones).
constexpr bool Supports(KeyType type) { return KeySize(type) == 4; }

// Maps `count` keys of a 32-bit `type`, in place, to their order values
// for the given order, and back.
void ToOrderValues(KeyType type, bool descending, uint32_t* keys, size_t count);
void FromOrderValues(KeyType type, bool descending, uint32_t* values,
                     size_t count);

// Encodes blocks [first, last) of the `count` order values at `values`:
// widths[b] and bases[b] for each block b, and the blocks' packed
// differences from `deltas` on. Returns the bytes written there. Block b's
// bytes never reach past b's end as raw keys (kBlockKeys * 4 bytes per
// block, a short last block counted whole), so `deltas` may be the values
// themselves when whole blocks of room lie behind them.
size_t EncodeBlocks(const uint32_t* values, size_t count, size_t first,
                    size_t last, uint8_t* widths, uint32_t* bases,
                    uint8_t* deltas);

// Bytes that the packed differences of blocks [first, last) take.
size_t DeltaBytes(const uint8_t* widths, size_t first, size_t last);

// One compact array as received: views of its fields.
struct Encoded {
  size_t count = 0;
  std::string_view widths;  // one byte per block
  std::string_view bases;   // a little-endian u32 per block
  std::string_view deltas;  // the packed differences, blocks in order
};

// OK when `encoded` is well-formed: the field sizes agree with `count`
// and every width is at most 32. Decoding trusts what this accepted.
absl::Status Check(const Encoded& encoded);

// Unpacks blocks [first, last) of a checked array into `out` (the whole
// array's order values; block b's go to out[b * kBlockKeys ...]).
// `deltas_offset`: where block `first` starts in encoded.deltas, i.e.
// DeltaBytes(widths, 0, first).
void UnpackBlocks(const Encoded& encoded, size_t first, size_t last,
                  size_t deltas_offset, uint32_t* out);

}  // namespace sortd::compact

#endif  // SORTD_CORE_COMPACT_KEYS_H_
