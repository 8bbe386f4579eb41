// sortd's shared-memory flags (server/flags_shm.cc): off without a socket;
// with one, the registry's and the socket's options as the flags give
// them, at least one connection and no negative bytes.
#include <gtest/gtest.h>

#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "server/flags.h"
#include "server/flags_internal.h"

namespace sortd {
namespace {

TEST(SharedMemoryFlags, OffWithoutASocket) {
  absl::FlagSaver saver;
  EXPECT_FALSE(RegionOptions().enabled);
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->regions.enabled);
  EXPECT_TRUE(o->shm.path.empty());
}

TEST(SharedMemoryFlags, TheFlagsGiveTheRegistrysAndTheSocketsOptions) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_shm_socket, "/run/sortd/shm/sortd.sock");
  absl::SetFlag(&FLAGS_shm_max_bytes, int64_t{1} << 30);
  absl::SetFlag(&FLAGS_shm_pinned_max_bytes, int64_t{1} << 29);
  absl::SetFlag(&FLAGS_shm_max_connections, 9);
  absl::SetFlag(&FLAGS_shm_idle_timeout, absl::Seconds(3));
  const RegionRegistry::Options regions = RegionOptions();
  EXPECT_TRUE(regions.enabled);
  EXPECT_EQ(regions.max_bytes, size_t{1} << 30);
  EXPECT_EQ(regions.max_adopted_bytes, size_t{1} << 29);
  const ShmSocket::Options socket = ShmSocketOptions();
  EXPECT_EQ(socket.path, "/run/sortd/shm/sortd.sock");
  EXPECT_EQ(socket.max_connections, 9u);
  EXPECT_EQ(socket.idle_timeout, absl::Seconds(3));
}

TEST(SharedMemoryFlags, ConnectionsAreAtLeastOneAndBytesNotNegative) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_shm_socket, "/run/sortd/shm/sortd.sock");
  absl::SetFlag(&FLAGS_shm_max_connections, 0);
  absl::SetFlag(&FLAGS_shm_max_bytes, int64_t{-5});
  absl::SetFlag(&FLAGS_shm_pinned_max_bytes, int64_t{-5});
  absl::StatusOr<SortdOptions> o = SortdOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->regions.enabled);
  EXPECT_EQ(o->shm.max_connections, 1u);
  EXPECT_EQ(o->regions.max_bytes, 0u);
  EXPECT_EQ(o->regions.max_adopted_bytes, 0u);
}

}  // namespace
}  // namespace sortd
