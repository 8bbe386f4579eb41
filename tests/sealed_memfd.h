// Test support: shared memory as a client sends it to sortd.
#ifndef SORTD_TESTS_SEALED_MEMFD_H_
#define SORTD_TESTS_SEALED_MEMFD_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>

namespace sortd::testing {

// A sealed (no shrinking, growing or further seals), fully allocated memfd
// of `bytes`; the caller closes it.
inline int SealedMemfd(size_t bytes) {
  const int fd = memfd_create("region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(posix_fallocate(fd, 0, static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            0);
  return fd;
}

}  // namespace sortd::testing

#endif  // SORTD_TESTS_SEALED_MEMFD_H_
