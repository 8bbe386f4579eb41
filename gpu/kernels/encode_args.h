// The arguments of the kernels that enter and leave the ordered key form
// (radix_sort.cl: radix_encode, radix_decode), in order, for the kernels
// and the host (gpu/passes/encode.h) alike; valid C++ and OpenCL C,
// expanded as onesweep_args.h says.
//   encode: raw keys -> ordered keys and iota indices (write_keys), and/or
//     every pass's digit counts into digit_totals (count_digits)
//   decode: ordered keys -> raw_out (decode_keys), and the payload gathered
//     by index (value_words 1 or 2, 0 for none)
//   kind, descending: the key kind (sort_constants.h) and the order
#ifndef SORTD_GPU_KERNELS_ENCODE_ARGS_H_
#define SORTD_GPU_KERNELS_ENCODE_ARGS_H_

#define SORTD_ENCODE_ARGS(CONST_BUF, BUF, U32, SEP)                       \
  CONST_BUF(key_t, raw) SEP() BUF(key_t, keys) SEP() BUF(uint, index)     \
  SEP() U32(n) SEP() U32(kind) SEP() U32(descending) SEP()                \
  BUF(uint, digit_totals) SEP() U32(count_digits) SEP() U32(write_keys)

#define SORTD_DECODE_ARGS(CONST_BUF, BUF, U32, SEP)                        \
  CONST_BUF(key_t, keys) SEP() BUF(key_t, raw_out) SEP()                   \
  CONST_BUF(uint, index) SEP() CONST_BUF(uint, values_in) SEP()            \
  BUF(uint, values_out) SEP() U32(n) SEP() U32(kind) SEP()                 \
  U32(descending) SEP() U32(value_words) SEP() U32(decode_keys)

#endif  // SORTD_GPU_KERNELS_ENCODE_ARGS_H_
