// The arguments of the one-launch radix pass (radix_onesweep and its twins
// radix_unordered_onesweep and radix_late_onesweep, radix_onesweep.clt), in
// order, for the kernel and the host (gpu/passes/onesweep.h) alike.
// Valid C++ and OpenCL C: the kernels include it by name, expanded when
// their sources are embedded (cmake/embed_kernels.cmake); each side expands
// the list with its own CONST_BUF, BUF, U32 and SEP (kernel_args.clh,
// gpu/kernel_args.h).
//   keys_in, keys_out, index_in, index_out: the pass's input and output
//     (index: with HAS_INDEX)
//   n: keys; shift: the digit's first bit, or a picked slot
//   starts[starts_at + d]: where digit d starts in the pass's output
//   status: look-back status words and the tile counter; tiles: tiles of
//     the pass; mode: the pass's mode (sort_constants.h)
//   status_at, next_at, zero_next, counter_at: where in `status` the
//     pass's words, a next pass's words (zeroed where zero_next) and the
//     tile counter are
//   mark, value_mask: marked statuses' parity bit and the count's bits
//   picks: the picked digits (radix_digit_starts)
#ifndef SORTD_GPU_KERNELS_ONESWEEP_ARGS_H_
#define SORTD_GPU_KERNELS_ONESWEEP_ARGS_H_

#define SORTD_ONESWEEP_ARGS(CONST_BUF, BUF, U32, SEP)                    \
  CONST_BUF(key_t, keys_in) SEP() BUF(key_t, keys_out) SEP()             \
  CONST_BUF(uint, index_in) SEP() BUF(uint, index_out) SEP()             \
  U32(n) SEP() U32(shift) SEP() CONST_BUF(uint, starts) SEP()            \
  U32(starts_at) SEP() BUF(uint, status) SEP() U32(tiles) SEP()          \
  U32(mode) SEP() U32(status_at) SEP() U32(next_at) SEP()                \
  U32(zero_next) SEP() U32(counter_at) SEP() U32(mark) SEP()             \
  U32(value_mask) SEP() CONST_BUF(uint, picks)

#endif  // SORTD_GPU_KERNELS_ONESWEEP_ARGS_H_
