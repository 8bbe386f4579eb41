// The host side of the kernel argument lists (gpu/kernels/*_args.h): each
// list becomes a struct with a member per argument, named as the kernel
// names it (a cl::Buffer for a buffer, a cl_uint for a number), and a
// kernel object that takes the struct and sets every argument in the
// list's order. The kernel declares its parameters from the same list
// (gpu/kernels/kernel_args.clh), so that the two cannot disagree.
//
//   SORTD_KERNEL_ARGS(ScatterArgs, SORTD_SCATTER_ARGS);
//   ArgsKernel<ScatterArgs> scatter;
//   scatter.Bind({.keys_in = in, .keys_out = out, ..., .picks = picks});
//   status = run.Launch(scatter, {.groups = tiles, .group_size = wg},
//                       "scatter");
#ifndef SORTD_GPU_KERNEL_ARGS_H_
#define SORTD_GPU_KERNEL_ARGS_H_

#include <cstddef>
#include <utility>

#include "gpu/cl.h"

namespace sortd::gpu {

// Where a kernel runs: `groups` work-groups of `group_size` work-items.
struct LaunchGrid {
  size_t groups = 0;
  size_t group_size = 0;
  // Enough groups of `group_size` for one work-item per item.
  static LaunchGrid Covering(size_t items, size_t group_size) {
    return {.groups = (items + group_size - 1) / group_size,
            .group_size = group_size};
  }
};

// A kernel whose arguments are the members of `Args` (a struct that
// SORTD_KERNEL_ARGS defines): Bind() sets them all, in order.
template <typename Args>
class ArgsKernel {
 public:
  ArgsKernel() = default;
  explicit ArgsKernel(cl::Kernel kernel) : kernel_(std::move(kernel)) {}
  ArgsKernel& Bind(const Args& args) {
    args.SetOn(kernel_);
    return *this;
  }
  cl::Kernel& kernel() { return kernel_; }

 private:
  cl::Kernel kernel_;
};

}  // namespace sortd::gpu

// The list's expansions on the host: members, then the calls that set them.
#define SORTD_HOST_ARG_BUF(type, name) cl::Buffer name;
#define SORTD_HOST_ARG_U32(name) cl_uint name = 0;
#define SORTD_HOST_SET_BUF(type, name) kernel.setArg(i++, name);
#define SORTD_HOST_SET_U32(name) kernel.setArg(i++, name);
#define SORTD_HOST_NO_SEP()

// Defines struct `Name`, whose members are the arguments of `LIST` (a
// SORTD_*_ARGS list) in its order, and whose SetOn(kernel) sets them.
#define SORTD_KERNEL_ARGS(Name, LIST)                                  \
  struct Name {                                                        \
    LIST(SORTD_HOST_ARG_BUF, SORTD_HOST_ARG_BUF, SORTD_HOST_ARG_U32,   \
         SORTD_HOST_NO_SEP)                                            \
    void SetOn(cl::Kernel& kernel) const {                             \
      cl_uint i = 0;                                                   \
      LIST(SORTD_HOST_SET_BUF, SORTD_HOST_SET_BUF, SORTD_HOST_SET_U32, \
           SORTD_HOST_NO_SEP)                                          \
    }                                                                  \
  }

#endif  // SORTD_GPU_KERNEL_ARGS_H_
