// A batch sorted where its requests' arrays lie: the batch codec over the
// OpenCL engine (PoCL's CPU device in CI), whose SortSegments takes
// requests whose arrays lie in its page-locked memory as parts. Every
// request comes back as if sorted alone, with short segments (one
// work-group each) and long ones (the whole batch as one array); batches of
// heap arrays or of mixed orders are packed instead, and come back the
// same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu/cpu_sorter.h"
#include "server/batch_codec.h"
#include "server/calibrate.h"
#include "tests/opencl_test_util.h"
#include "tests/reference.h"
#include "tests/sort_check.h"

namespace sortd::gpu {
namespace {

// A host array from the engine's page-locked memory or from the heap.
class Array {
 public:
  Array(size_t bytes, HostMemory* pinned) : bytes_(bytes), pinned_(pinned) {
    const size_t size = std::max<size_t>(bytes, 1);
    if (pinned_ != nullptr) {
      data_ = static_cast<std::byte*>(pinned_->Allocate(size));
    }
    if (data_ == nullptr) {
      pinned_ = nullptr;
      data_ = new std::byte[size];
    }
  }
  ~Array() {
    if (pinned_ != nullptr) {
      pinned_->Free(data_, std::max<size_t>(bytes_, 1));
    } else {
      delete[] data_;
    }
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;
  std::byte* data() { return data_; }
  bool pinned() const { return pinned_ != nullptr; }

 private:
  size_t bytes_;
  HostMemory* pinned_;
  std::byte* data_ = nullptr;
};

// One request of a batch, with its arrays and what it should get back.
template <typename K>
struct Request {
  std::vector<K> keys;
  bool descending = false;
  std::unique_ptr<Array> in, values, out, values_out, perm;
  SortJob job;

  Request(std::vector<K> k, bool desc, bool with_values, bool with_perm,
          HostMemory* pinned)
      : keys(std::move(k)), descending(desc) {
    const size_t n = keys.size();
    in = std::make_unique<Array>(n * sizeof(K), pinned);
    out = std::make_unique<Array>(n * sizeof(K), pinned);
    if (n > 0) std::memcpy(in->data(), keys.data(), n * sizeof(K));
    job.key_type = sortd::testing::KeyTypeOf<K>();
    job.order = desc ? Order::kDescending : Order::kAscending;
    job.count = n;
    job.keys = in->data();
    job.keys_out = out->data();
    if (with_values) {
      values = std::make_unique<Array>(n * 8, pinned);
      values_out = std::make_unique<Array>(n * 8, pinned);
      for (size_t i = 0; i < n; ++i) {
        const uint64_t v = i * 1000003 + n;
        std::memcpy(values->data() + i * 8, &v, 8);
      }
      job.value_type = ValueType::kU64;
      job.values = values->data();
      job.values_out = values_out->data();
    }
    if (with_perm) {
      perm = std::make_unique<Array>(n * 4, pinned);
      job.permutation_out = perm->data();
    }
  }

  void Check(const std::string& what) const {
    const std::vector<uint32_t> ref =
        sortd::testing::RefPermutation(keys, descending);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(
          0, std::memcmp(out->data() + i * sizeof(K), &keys[ref[i]], sizeof(K)))
          << what << ": key at " << i << " of " << keys.size();
      if (perm != nullptr) {
        uint32_t p;
        std::memcpy(&p, perm->data() + i * 4, 4);
        ASSERT_EQ(p, ref[i]) << what << ": permutation at " << i;
      }
      if (values != nullptr) {
        uint64_t v;
        std::memcpy(&v, values_out->data() + i * 8, 8);
        ASSERT_EQ(v, uint64_t{ref[i]} * 1000003 + keys.size())
            << what << ": value at " << i;
      }
    }
  }
};

bool HasStage(const StageTimes& stages, const std::string& name) {
  return std::any_of(stages.begin(), stages.end(),
                     [&](const StageTime& s) { return s.stage == name; });
}

// How a batch is made and sorted.
struct Batch {
  sortd::testing::Shape shape = sortd::testing::Shape::kFewDistinct;
  bool descending = false;
  bool mixed_orders = false;  // every other request the other way
  bool values = false, permutation = false;
  bool pinned = true;  // arrays in the engine's page-locked memory
  // Straight to the engine's SortSegments as parts (whatever the arrays),
  // not through the batch codec.
  bool direct = false;
  // The batch codec's in_place_min_keys.
  size_t in_place_min_keys = 0;
};

template <typename K>
void CheckBatch(const std::vector<size_t>& lengths, const Batch& b) {
  OpenClEngine& engine = Engine();
  std::shared_ptr<HostMemory> memory = engine.host_memory();
  std::vector<std::unique_ptr<Request<K>>> requests;
  std::vector<const SortJob*> jobs;
  std::vector<uint32_t> offsets = {0};
  for (size_t i = 0; i < lengths.size(); ++i) {
    const bool desc =
        b.mixed_orders && i % 2 == 1 ? !b.descending : b.descending;
    requests.push_back(std::make_unique<Request<K>>(
        sortd::testing::Generate<K>(b.shape, lengths[i], i + 3), desc, b.values,
        b.permutation, b.pinned ? memory.get() : nullptr));
    jobs.push_back(&requests.back()->job);
    offsets.push_back(offsets.back() + static_cast<uint32_t>(lengths[i]));
  }
  if (b.pinned) {
    ASSERT_TRUE(requests.front()->in->pinned());
  }
  StageTimes stages;
  if (b.direct) {
    SortJob whole = *jobs.front();
    whole.count = offsets.back();
    whole.parts = jobs;
    const absl::Status s = engine.SortSegments(whole, offsets);
    ASSERT_TRUE(s.ok()) << s;
    // The engine's permutation entries index the whole batch.
    for (size_t i = 0; b.permutation && i < requests.size(); ++i) {
      std::byte* p = requests[i]->perm->data();
      for (size_t k = 0; k < lengths[i]; ++k) {
        uint32_t index;
        std::memcpy(&index, p + k * 4, 4);
        index -= offsets[i];
        std::memcpy(p + k * 4, &index, 4);
      }
    }
  } else {
    batch::PackBuffer pack;
    const absl::Status s =
        batch::SortTogether(engine, jobs, &stages, &pack, b.in_place_min_keys);
    ASSERT_TRUE(s.ok()) << s;
    // One order throughout, arrays in page-locked memory, requests long
    // enough on average: sorted where they lie, nothing packed. Heap
    // arrays are packed (cheaper than staging each).
    const bool short_requests =
        b.in_place_min_keys == SIZE_MAX ||
        offsets.back() / lengths.size() < b.in_place_min_keys;
    EXPECT_EQ(HasStage(stages, "host_pack"),
              b.mixed_orders || !b.pinned || short_requests);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i]->Check(absl::StrCat("request ", i, " of ", requests.size()));
  }
}

template <typename K>
void EveryWay(const std::vector<size_t>& lengths, bool values,
              bool permutation) {
  using sortd::testing::Shape;
  for (bool desc : {false, true}) {
    for (bool pinned : {true, false}) {
      SCOPED_TRACE(absl::StrCat(desc ? "descending" : "ascending",
                                pinned ? ", page-locked" : ", heap"));
      CheckBatch<K>(lengths, {.descending = desc,
                              .values = values,
                              .permutation = permutation,
                              .pinned = pinned});
    }
    // Every key the same (every pass after the first skipped: the keys
    // stay ordered and are decoded), then sorted keys; heap arrays moved
    // part by part through the staging ring.
    for (Shape shape : {Shape::kAllEqual, Shape::kSorted, Shape::kRandom}) {
      SCOPED_TRACE(sortd::testing::ShapeName(shape));
      CheckBatch<K>(lengths, {.shape = shape,
                              .descending = desc,
                              .values = values,
                              .permutation = permutation,
                              .pinned = false,
                              .direct = true});
    }
  }
}

TEST(SortParts, ShortSegmentsEachAsIfAlone) {
  const std::vector<size_t> lengths = {5, 0, 1, 300, 17, 1000, 2, 64};
  EveryWay<uint32_t>(lengths, false, false);
  EveryWay<double>(lengths, true, true);
  EveryWay<int64_t>(lengths, false, true);
}

TEST(SortParts, LongSegmentsAsOneArray) {
  // Longer than a work-group sorts: the batch is sorted as one array.
  const size_t block = Engine().policy().bitonic.Block(64);
  const std::vector<size_t> lengths = {3 * block + 7, 11, 0, 2 * block,
                                       block + 1};
  EveryWay<uint32_t>(lengths, false, false);
  EveryWay<float>(lengths, true, true);
  EveryWay<uint64_t>(lengths, true, false);
}

TEST(SortParts, OneSegmentAsOneSort) {
  // A batch of one request, as parts: the plain sort's path.
  for (size_t n : {size_t{100}, size_t{20000}}) {
    EveryWay<int32_t>({n}, true, true);
  }
}

TEST(SortParts, ShortRequestsArePackedFromPageLockedMemoryToo) {
  // 1000 keys a request on average: in place from 1000, packed above.
  const std::vector<size_t> lengths = {1500, 500, 1200, 800};
  for (size_t min : {size_t{0}, size_t{1000}, size_t{1001}, SIZE_MAX}) {
    SCOPED_TRACE(absl::StrCat("in place from ", min, " keys"));
    CheckBatch<uint32_t>(lengths, {.shape = sortd::testing::Shape::kRandom,
                                   .values = true,
                                   .permutation = true,
                                   .in_place_min_keys = min});
    CheckBatch<int64_t>(lengths, {.shape = sortd::testing::Shape::kRandom,
                                  .descending = true,
                                  .in_place_min_keys = min});
  }
}

// The startup calibration times batches of page-locked requests both
// packed and where they lie, and the smaller ones packed only; each path
// also under load.
TEST(SortParts, CalibrationTimesPageLockedBatchesBothWays) {
  CpuSorter cpu({.threads = 1});
  const CalibrationOptions options{.max_keys = 16384,
                                   .repeats = 1,
                                   .max_batch_keys = 16384,
                                   .pinned_min_bytes = 4096};
  absl::StatusOr<RoutingTimings> t = MeasureRouting(cpu, Engine(), options);
  ASSERT_TRUE(t.ok()) << t.status();
  // Batches of 256 (64 a batch), 1024 (16) and 4096 keys (4): the last two
  // page-locked.
  ASSERT_EQ(t->sort.batched.size(), 3u);
  for (const auto& b : t->sort.batched) {
    SCOPED_TRACE(b.units);
    EXPECT_GT(b.share, 0);
    EXPECT_EQ(b.in_place > 0, b.units * 4 >= options.pinned_min_bytes);
  }
  // Both paths are also timed with every caller busy.
  for (const auto& p : t->sort.points) {
    SCOPED_TRACE(p.units);
    EXPECT_GT(p.cpu_loaded, 0);
    EXPECT_GT(p.gpu_loaded, 0);
  }
  for (const auto& p : t->transpose.points) {
    SCOPED_TRACE(p.units);
    EXPECT_GT(p.cpu_loaded, 0);
    EXPECT_GT(p.gpu_loaded, 0);
  }
  const Calibration c = ChooseRouting(*t, options.solo_gain, options.cpu_gain);
  EXPECT_THAT(c.report, ::testing::HasSubstr("keys in a batch: packed"));
  // Where batches may hold four of the largest size timed alone, that size
  // is timed in a batch too.
  CalibrationOptions wide = options;
  wide.max_keys = 4096;
  absl::StatusOr<RoutingTimings> w = MeasureRouting(cpu, Engine(), wide);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->sort.batched.size(), 3u);
  EXPECT_EQ(w->sort.batched.back().units, 4096u);
  EXPECT_TRUE(w->sort.batched.back().beyond_max_keys);
  EXPECT_FALSE(w->sort.batched.front().beyond_max_keys);
}

TEST(SortParts, MixedOrdersArePacked) {
  const size_t block = Engine().policy().bitonic.Block(32);
  CheckBatch<int32_t>(
      {100, 2 * block + 3, 9},
      {.mixed_orders = true, .values = true, .permutation = true});
}

TEST(SortParts, RejectsPartsThatDoNotMatchTheBatch) {
  std::vector<uint32_t> a(8, 1), b(8, 2), out_a(8), out_b(8);
  SortJob pa{.key_type = KeyType::kU32,
             .count = 8,
             .keys = reinterpret_cast<const std::byte*>(a.data()),
             .keys_out = reinterpret_cast<std::byte*>(out_a.data())};
  SortJob pb = pa;
  pb.keys = reinterpret_cast<const std::byte*>(b.data());
  pb.keys_out = reinterpret_cast<std::byte*>(out_b.data());
  pb.order = Order::kDescending;
  std::vector<const SortJob*> parts = {&pa, &pb};
  SortJob whole = pa;
  whole.count = 16;
  whole.parts = parts;
  const std::vector<uint32_t> offsets = {0, 8, 16};
  EXPECT_EQ(Engine().SortSegments(whole, offsets).code(),
            absl::StatusCode::kInvalidArgument);
  pb.order = Order::kAscending;
  whole.count = 15;
  EXPECT_EQ(Engine().SortSegments(whole, {0, 8, 15}).code(),
            absl::StatusCode::kInvalidArgument);
  whole.count = 16;
  const std::vector<const SortJob*> with_null = {&pa, nullptr};
  whole.parts = with_null;
  const absl::Status null_part = Engine().SortSegments(whole, offsets);
  EXPECT_EQ(null_part.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(null_part.message(), ::testing::HasSubstr("null"));
  whole.parts = parts;
  EXPECT_TRUE(Engine().SortSegments(whole, offsets).ok());
  EXPECT_EQ(out_a, a);
  EXPECT_EQ(out_b, b);
}

}  // namespace
}  // namespace sortd::gpu
