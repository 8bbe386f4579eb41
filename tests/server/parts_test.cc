// PartAssembler: parts of an array come together whatever their order; a
// part that contradicts its group, or a group that does not complete in
// time, fails every part of it, each once, with a message that says why.
#include "server/parts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sortd {
namespace {

using ::testing::HasSubstr;

// Calls from one client (Peer::client: a host without TLS).
const std::string kScope = "ipv4:10.0.0.7";

// A group name: short test names padded to the 16 bytes a name needs at
// least (an empty or over-long one is kept as it is, to be refused).
v1::Part Spec(const std::string& group, uint32_t index, uint32_t count) {
  v1::Part p;
  p.set_group(group.empty() || group.size() >= 16
                  ? group
                  : group + std::string(16 - group.size(), '.'));
  p.set_index(index);
  p.set_count(count);
  return p;
}

// A part whose failure is recorded in `failures` (shared with the test).
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<uint32_t, absl::Status>> failures;

  // Waits (30 s at most) until `n` parts have failed.
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30),
                       [&] { return failures.size() >= n; });
  }

  PartAssembler::Part Make(uint32_t index, size_t keys = 10,
                           KeyType type = KeyType::kU32) {
    PartAssembler::Part p;
    p.terms.key_type = type;
    p.job.key_type = type;
    p.job.count = keys;
    p.bytes = keys * KeySize(type);  // a message of its keys alone
    p.fail = [this, index](const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      failures.emplace_back(index, s);
      cv.notify_all();
    };
    return p;
  }
};

TEST(PartAssembler, PartsComeTogetherInIndexOrderWhateverTheirArrival) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  PartAssembler parts({});
  for (uint32_t i : {2u, 0u}) {
    auto waiting = parts.Add(kScope, Spec("g", i, 3), r.Make(i, 10 + i));
    ASSERT_TRUE(waiting.ok()) << waiting.status();
    EXPECT_TRUE(waiting->empty());
  }
  EXPECT_EQ(parts.waiting_groups(), 1u);
  auto whole = parts.Add(kScope, Spec("g", 1, 3), r.Make(1, 11));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*whole)[i].index, i);
    EXPECT_EQ((*whole)[i].job.count, 10u + i);
  }
  EXPECT_EQ(parts.waiting_groups(), 0u);
  EXPECT_TRUE(r.failures.empty());
  // One part alone is a whole array.
  auto single = parts.Add(kScope, Spec("solo", 0, 1), r.Make(0));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->size(), 1u);
}

TEST(PartAssembler, ABadSpecIsRefusedAlone) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  PartAssembler parts({});
  EXPECT_THAT(parts.Add(kScope, Spec("", 0, 2), r.Make(0)).status().message(),
              HasSubstr("part.group"));
  EXPECT_THAT(parts.Add(kScope, Spec(std::string(65, 'g'), 0, 2), r.Make(0))
                  .status()
                  .message(),
              HasSubstr("part.group holds 65 bytes"));
  EXPECT_THAT(parts.Add(kScope, Spec("g", 0, 0), r.Make(0)).status().message(),
              HasSubstr("part.count is 0"));
  EXPECT_THAT(parts.Add(kScope, Spec("g", 0, 65), r.Make(0)).status().message(),
              HasSubstr("1 to 64 parts"));
  EXPECT_THAT(parts.Add(kScope, Spec("g", 3, 3), r.Make(3)).status().message(),
              HasSubstr("part.index is 3"));
  EXPECT_EQ(parts.waiting_groups(), 0u);
  EXPECT_TRUE(r.failures.empty());
}

TEST(PartAssembler, AContradictingPartFailsTheWholeGroup) {
  struct Case {
    const char* name;
    v1::Part spec;
    KeyType type;
    const char* message;
  };
  const Case cases[] = {
      {"another count", Spec("g", 1, 4), KeyType::kU32, "part.count is 4"},
      {"a repeated index", Spec("g", 0, 3), KeyType::kU32, "came twice"},
      {"another key type", Spec("g", 1, 3), KeyType::kF32, "differs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Recorder r;  // outlives the assembler, which may fail parts as it goes
    PartAssembler parts({});
    ASSERT_TRUE(parts.Add(kScope, Spec("g", 0, 3), r.Make(0)).ok());
    ASSERT_TRUE(parts.Add(kScope, Spec("g", 2, 3), r.Make(2)).ok());
    const auto refused =
        parts.Add(kScope, c.spec, r.Make(c.spec.index(), 10, c.type));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(), HasSubstr(c.message));
    // The two waiting parts were failed, once each, saying why.
    ASSERT_EQ(r.failures.size(), 2u);
    for (const auto& [index, status] : r.failures) {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(), HasSubstr("another part of the array"));
    }
    EXPECT_EQ(parts.waiting_groups(), 0u);
  }
}

// A part refused before it joins its group (a bad index or count, or a
// request that did not validate) still fails the parts waiting for it:
// the array can no longer be whole.
TEST(PartAssembler, ARefusedPartFailsTheWaitingOnes) {
  struct Case {
    const char* name;
    v1::Part spec;
    const char* message;
  };
  const Case cases[] = {
      {"an index past the count", Spec("g", 3, 3), "part.index is 3"},
      {"a count of 0", Spec("g", 1, 0), "part.count is 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Recorder r;  // outlives the assembler, which may fail parts as it goes
    PartAssembler parts({});
    ASSERT_TRUE(parts.Add(kScope, Spec("g", 0, 3), r.Make(0)).ok());
    ASSERT_TRUE(parts.Add(kScope, Spec("other", 0, 2), r.Make(7)).ok());
    const auto refused = parts.Add(kScope, c.spec, r.Make(c.spec.index()));
    EXPECT_THAT(refused.status().message(), HasSubstr(c.message));
    ASSERT_EQ(r.failures.size(), 1u);
    EXPECT_EQ(r.failures[0].first, 0u);
    EXPECT_THAT(r.failures[0].second.message(),
                HasSubstr("another part of the array was refused"));
    EXPECT_THAT(r.failures[0].second.message(), HasSubstr(c.message));
    EXPECT_EQ(parts.waiting_groups(), 1u);  // "other" waits on
  }
  // A request that did not validate, refused by the service.
  Recorder r;
  PartAssembler parts({});
  ASSERT_TRUE(parts.Add(kScope, Spec("g", 0, 2), r.Make(0)).ok());
  const absl::Status s =
      parts.Refuse(kScope, Spec("g", 1, 2),
                   absl::InvalidArgumentError("5 bytes of u32 keys"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].second.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.failures[0].second.message(),
              HasSubstr("another part of the array was refused: 5 bytes"));
  EXPECT_EQ(parts.waiting_groups(), 0u);
  // A group name no group can have fails nothing.
  EXPECT_EQ(
      parts.Refuse(kScope, Spec("", 0, 2), absl::InvalidArgumentError("x")),
      absl::InvalidArgumentError("x"));
}

TEST(PartAssembler, WaitingBytesAreBounded) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  PartAssembler parts({.max_waiting_bytes = 100});
  ASSERT_TRUE(
      parts.Add(kScope, Spec("a", 0, 2), r.Make(0, 20)).ok());  // 80 bytes
  const auto refused =
      parts.Add(kScope, Spec("b", 0, 2), r.Make(0, 6));  // 24 more
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("would pass the bound"));
  // Group "a" is untouched and completes; its bytes are given back.
  auto whole = parts.Add(kScope, Spec("a", 1, 2), r.Make(1, 20));
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 2u);
  EXPECT_TRUE(parts.Add(kScope, Spec("c", 0, 2), r.Make(0, 25)).ok());
  EXPECT_TRUE(r.failures.empty());
}

// A waiting part holds its whole message, whatever its arrays: a part of
// no keys padded with unknown fields counts its padding.
TEST(PartAssembler, WaitingPartsCountTheirMessageBytes) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  size_t parts_seen = 0, bytes_seen = 0;
  PartAssembler parts(
      {.max_waiting_bytes = 1000, .on_change = [&](size_t n, size_t bytes) {
         parts_seen = n;
         bytes_seen = bytes;
       }});
  PartAssembler::Part padded = r.Make(0, 0);
  padded.bytes = 600;
  ASSERT_TRUE(parts.Add(kScope, Spec("a", 0, 3), std::move(padded)).ok());
  EXPECT_EQ(parts_seen, 1u);
  EXPECT_EQ(bytes_seen, 600u);
  PartAssembler::Part more = r.Make(1, 0);
  more.bytes = 600;
  const auto refused = parts.Add(kScope, Spec("a", 1, 3), std::move(more));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("600 would pass"));
  // The group failed with it, and its bytes were given back.
  EXPECT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(parts_seen, 0u);
  EXPECT_EQ(bytes_seen, 0u);
}

// Groups are scoped by the client (Peer::client): the same name from
// another client is another group, which never sees the first one's parts.
TEST(PartAssembler, AGroupNameFromAnotherHostIsAnotherGroup) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  PartAssembler parts({});
  ASSERT_TRUE(parts.Add(kScope, Spec("g", 0, 2), r.Make(0, 5)).ok());
  auto other = parts.Add("ipv4:10.0.0.8", Spec("g", 1, 2), r.Make(1, 6));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->empty());  // waits in a group of its own
  EXPECT_EQ(parts.waiting_groups(), 2u);
  // The same host (another connection) completes the first.
  auto whole = parts.Add(kScope, Spec("g", 1, 2), r.Make(1, 7));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 2u);
  EXPECT_EQ((*whole)[0].job.count, 5u);
  EXPECT_EQ((*whole)[1].job.count, 7u);
  EXPECT_EQ(parts.waiting_groups(), 1u);
  EXPECT_TRUE(r.failures.empty());
}

TEST(PartAssembler, NamesAreOfSixteenBytesAtLeast) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  PartAssembler parts({});
  v1::Part short_name = Spec("g", 0, 2);
  short_name.set_group(std::string(15, 'g'));
  const auto refused = parts.Add(kScope, short_name, r.Make(0));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("16 to 64 random bytes"));
  EXPECT_EQ(parts.waiting_groups(), 0u);
}

TEST(PartAssembler, AGroupNotWholeInTimeFailsWithWhatCame) {
  Recorder r;  // outlives the assembler, which may fail parts as it goes
  PartAssembler parts({.timeout = absl::Milliseconds(50)});
  ASSERT_TRUE(parts.Add(kScope, Spec("g", 2, 4), r.Make(2)).ok());
  ASSERT_TRUE(parts.Add(kScope, Spec("g", 0, 4), r.Make(0)).ok());
  ASSERT_TRUE(r.WaitFor(2));
  EXPECT_EQ(parts.waiting_groups(), 0u);
  std::lock_guard<std::mutex> lock(r.mu);
  ASSERT_EQ(r.failures.size(), 2u);
  for (const auto& [index, status] : r.failures) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(status.message(), HasSubstr("part(s) 0, 2 of 4 came"));
  }
}

TEST(PartAssembler, FailAllAndTheDestructorEndWaitingParts) {
  Recorder r;
  {
    PartAssembler parts({});
    ASSERT_TRUE(parts.Add(kScope, Spec("a", 0, 2), r.Make(0)).ok());
    parts.FailAll(absl::UnavailableError("draining"));
    ASSERT_EQ(r.failures.size(), 1u);
    EXPECT_EQ(r.failures[0].second.code(), absl::StatusCode::kUnavailable);
    ASSERT_TRUE(parts.Add(kScope, Spec("b", 1, 2), r.Make(1)).ok());
  }
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_EQ(r.failures[1].first, 1u);
  EXPECT_EQ(r.failures[1].second.code(), absl::StatusCode::kUnavailable);
  // Closed (draining): waiting parts fail, and later ones are refused.
  PartAssembler closing({});
  ASSERT_TRUE(closing.Add(kScope, Spec("c", 0, 2), r.Make(0)).ok());
  closing.Close(absl::UnavailableError("draining"));
  EXPECT_EQ(r.failures.size(), 3u);
  const auto late = closing.Add(kScope, Spec("c", 1, 2), r.Make(1));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(closing.waiting_groups(), 0u);
  EXPECT_EQ(r.failures.size(), 3u);
}

}  // namespace
}  // namespace sortd
