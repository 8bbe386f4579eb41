// Values that the host code and the OpenCL kernels must agree on: run-time
// argument encodings and the variants a build option selects. Plain
// #defines, valid C++ and OpenCL C: the engine includes this file, and the
// kernels include it by name, expanded when their sources are
// embedded (cmake/embed_kernels.cmake).
#ifndef SORTD_GPU_KERNELS_SORT_CONSTANTS_H_
#define SORTD_GPU_KERNELS_SORT_CONSTANTS_H_

// Key kinds: how raw key bits become unsigned bits in the requested order.
#define SORTD_KIND_UNSIGNED 0u
#define SORTD_KIND_SIGNED 1u
#define SORTD_KIND_FLOAT 2u

// A radix pass's `mode` argument: the key kind (bits 0-1), descending order
// (bit 2), whether the pass reads the raw keys (it orders them as it loads
// them and makes the indices from their positions) and whether it stores
// raw keys (it is the last).
#define SORTD_MODE_KIND_MASK 3u
#define SORTD_MODE_DESCENDING 4u
#define SORTD_MODE_FIRST 8u
#define SORTD_MODE_LAST 16u

// A one-launch pass's look-back status word per tile and digit: the kind of
// value in the top two bits, then (with marked statuses) the parity of the
// pass in bit 29, then the count.
#define SORTD_STATUS_AGGREGATE (1u << 30)
#define SORTD_STATUS_PREFIX (2u << 30)
#define SORTD_STATUS_MARK_SHIFT 29

// How the scatter ranks a tile (-DRANKING). Work-item counters in local
// memory; or warp-level ranking of a whole digit, with the warp's
// operations emulated through local memory (the portable twin), with PTX
// ballots (NVIDIA only), or with OpenCL sub-group operations (a warp is a
// sub-group of a required size: Intel GPUs).
#define SORTD_RANK_WORK_ITEM 0
#define SORTD_RANK_WARP_EMULATED 1
#define SORTD_RANK_WARP_BALLOTS 2
#define SORTD_RANK_SUBGROUP 4

// Which sub-group built-ins SORTD_RANK_SUBGROUP uses (-DSUBGROUP_OPS): the
// Khronos ones with sub_group_ballot (cl_khr_subgroups,
// cl_khr_subgroup_ballot, cl_khr_subgroup_shuffle); the Khronos ones with a
// ballot made by a sub-group reduction (cl_khr_subgroups,
// cl_khr_subgroup_shuffle); or Intel's (cl_intel_subgroups: its shuffle,
// and the same reduction).
#define SORTD_SUBGROUP_KHR_BALLOT 1
#define SORTD_SUBGROUP_KHR 2
#define SORTD_SUBGROUP_INTEL 3

// Picked digits (radix_digit_starts with slots > 0): a pass whose `shift`
// argument is SORTD_PICKED_SLOT + s sorts the digit in word s of the picks
// buffer; word SORTD_PICKS_GROUP_SHIFT holds the bit below which the picked
// passes left keys unsorted (0: none), and word SORTD_PICKS_UNSETTLED is set
// by radix_settle when a group of keys was too long for it to sort
// (SORTD_UNSETTLED_LONG_RUN: the engine sorts by every digit), or by
// radix_digit_starts when it picked the lowest digits instead
// (SORTD_UNSETTLED_CONTINUE: the engine sorts by the digits above them).
#define SORTD_PICKED_SLOT 256u
#define SORTD_PICKS_GROUP_SHIFT 16
#define SORTD_PICKS_UNSETTLED 17
#define SORTD_PICKS_WORDS 18
#define SORTD_UNSETTLED_LONG_RUN 1u
#define SORTD_UNSETTLED_CONTINUE 2u
// Keys radix_digit_starts samples to judge the runs picked digits leave.
#define SORTD_PICK_SAMPLES 512
// The multiplier of the samples' offsets within their strata (32-bit).
#define SORTD_SAMPLE_JITTER 2654435761u
// The longest group of keys radix_settle sorts, and the keys each of its
// work-items takes.
#define SORTD_SETTLE_MAX 64
#define SORTD_SETTLE_ITEMS 8

#endif  // SORTD_GPU_KERNELS_SORT_CONSTANTS_H_
