// Gathers the parts of arrays sent as several Sort calls (SortRequest.part)
// until each array is whole, so that it is sorted once.
//
// A part waits, holding its call open, until the last part of its group
// arrives; Add then hands back every part of the group in index order. A
// part that contradicts its group (another key type, a repeated index, a
// different count ...) fails the group: Add returns the error for it and
// ends the others through their `fail`. A group not whole within `timeout`
// of its first part fails with DEADLINE_EXCEEDED, from a thread of its own.
// The bytes of waiting parts are bounded: a part beyond the bound is
// refused (RESOURCE_EXHAUSTED) and fails its group; a part counts the
// bytes of its whole message (what it holds while it waits), whatever its
// arrays.
//
// Groups are scoped: a group is named by its `scope` (the client, as
// Peer::client says: its verified certificate's identity under mutual
// TLS, else its host's address, which every connection of one client
// shares) and its name, 16 to 64 bytes the client draws at random (128
// bits at least), so that another client never joins an array it did not
// send (it gets a group of its own); one that shares the scope (the same
// host, without TLS) must learn the name.
//
//   PartAssembler parts({.timeout = absl::Seconds(10)});
//   absl::StatusOr<std::vector<PartAssembler::Part>> whole =
//       parts.Add(scope, request.part(), std::move(part));
//   if (!whole.ok()) ... fail this call ...
//   else if (!whole->empty()) ... sort the group ...
//   // else: the call waits; its `fail` or the group's sort ends it.
#ifndef SORTD_SERVER_PARTS_H_
#define SORTD_SERVER_PARTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mutex.h"
#include "core/sorter.h"
#include "sortd/v1/sortd.pb.h"

namespace sortd {

class PartAssembler {
 public:
  // Most parts in one group, and shortest and longest group name, accepted.
  static constexpr uint32_t kMaxParts = 64;
  static constexpr size_t kMinGroupBytes = 16;
  static constexpr size_t kMaxGroupBytes = 64;

  struct Options {
    // How long a group may take to become whole, from its first part.
    absl::Duration timeout = absl::Seconds(10);
    // Message bytes that waiting parts may hold, all groups together.
    size_t max_waiting_bytes = size_t{4} << 30;
    // Called with the parts waiting and their bytes after every change,
    // under the assembler's lock (cheap, never calling back into it).
    std::function<void(size_t, size_t)> on_change = nullptr;
  };

  // What every part of a group must agree on.
  struct Terms {
    KeyType key_type = KeyType::kU32;
    ValueType value_type = ValueType::kNone;
    Order order = Order::kAscending;
    bool permutation = false;
    int32_t key_coding = 0;
    bool operator==(const Terms&) const = default;
  };

  struct Part {
    uint32_t index = 0;
    Terms terms;
    SortJob job;  // this part's arrays (the inputs)
    // What the part holds while it waits: its request message's bytes.
    size_t bytes = 0;
    // Ends the part's call with an error; called at most once, never with
    // the assembler's lock held.
    std::function<void(const absl::Status&)> fail;
    std::shared_ptr<void> call;  // kept alive while the part waits
  };

  explicit PartAssembler(const Options& options);
  ~PartAssembler();  // fails what still waits (UNAVAILABLE)
  PartAssembler(const PartAssembler&) = delete;
  PartAssembler& operator=(const PartAssembler&) = delete;

  // Adds `part` of the group `spec` names in `scope`. Returns the group's
  // parts, in index order, when this one completes it; an empty vector
  // when it waits; an error (for this part, whose `fail` is not called)
  // when it is refused, which also fails the rest of its group.
  absl::StatusOr<std::vector<Part>> Add(const std::string& scope,
                                        const v1::Part& spec, Part part);
  // A part of the group `spec` names in `scope` refused before it could be
  // added (its request did not validate): the group's waiting parts fail
  // with it. Returns `refused`, for that part's own call.
  absl::Status Refuse(const std::string& scope, const v1::Part& spec,
                      const absl::Status& refused);

  // Fails every waiting part with `status`.
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // The same, and refuses every part that comes later with `status` (the
  // server is draining: the rest of a new array would never come).
  void Close(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  // Groups waiting for parts.
  size_t waiting_groups() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Group {
    uint32_t count = 0;
    absl::Time expires;
    size_t bytes = 0;         // of the parts waiting
    size_t waiting = 0;       // parts counted in waiting_parts_
    std::vector<Part> parts;  // as they came
  };

  using Key = std::pair<std::string, std::string>;  // scope, name

  // Removes `key`'s group and hands back its parts to be failed.
  std::vector<Part> Drop(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Expire() ABSL_LOCKS_EXCLUDED(mu_);
  void ChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `part` cannot join `g` (count, index or terms unlike the group's,
  // or no room to wait); OK when it can.
  absl::Status MismatchLocked(const Group& g, const v1::Part& spec,
                              const Part& part) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `part` to `g`, to wait (and be counted) for the group's others.
  void WaitLocked(Group& g, Part part) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar changed_;
  std::map<Key, Group> groups_ ABSL_GUARDED_BY(mu_);
  size_t waiting_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t waiting_parts_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // set by Close
  std::thread reaper_;
};

}  // namespace sortd

#endif  // SORTD_SERVER_PARTS_H_
