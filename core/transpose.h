// Transposition of one 32x32 bit matrix held as 32 uint32 rows.
//
// Bit j of row i (bit 0 = least significant = column 0) moves to bit i of
// row j. Five rounds of masked block swaps: 16x16 blocks, then 8x8 inside
// them, down to single bits; 80 word operations instead of 1024 bit moves.
//
//   uint32_t m[32] = {...};
//   TransposeBits32(m);  // in place
#ifndef SORTD_CORE_TRANSPOSE_H_
#define SORTD_CORE_TRANSPOSE_H_

#include <cstdint>

namespace sortd {

inline void TransposeBits32(uint32_t a[32]) {
  uint32_t mask = 0x0000FFFFu;
  for (int width = 16; width != 0; width >>= 1, mask ^= mask << width) {
    // Swap the upper-right block (high bits of the upper rows) with the
    // lower-left block (low bits of the lower rows) of every 2w x 2w tile.
    for (int k = 0; k < 32; k = (k + width + 1) & ~width) {
      uint32_t t = ((a[k] >> width) ^ a[k + width]) & mask;
      a[k] ^= t << width;
      a[k + width] ^= t;
    }
  }
}

}  // namespace sortd

#endif  // SORTD_CORE_TRANSPOSE_H_
