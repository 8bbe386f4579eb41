// The batch codec over the CPU engine: requests of different key types and
// orders packed into one segmented sort come back each as if sorted alone
// (keys, values, permutation into its own array); transposes packed
// together, or cut into pieces, come back as if run alone.
#include "server/batch_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cpu/cpu_sorter.h"
#include "tests/reference.h"

namespace sortd {
namespace {

// One sort request of the batch, with its buffers.
struct Request {
  KeyType type = KeyType::kU32;
  bool descending = false;
  std::vector<std::byte> keys, values, keys_out, values_out, perm_out;
  SortJob job;
};

template <typename K>
Request Make(KeyType type, bool descending, size_t n, uint64_t seed) {
  Request r;
  r.type = type;
  r.descending = descending;
  const std::vector<K> keys =
      testing::Generate<K>(testing::Shape::kFewDistinct, n, seed);
  r.keys.resize(n * sizeof(K));
  if (n > 0) std::memcpy(r.keys.data(), keys.data(), r.keys.size());
  r.values.resize(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v = static_cast<uint32_t>(i * 7 + seed);
    std::memcpy(r.values.data() + i * 4, &v, 4);
  }
  r.keys_out.resize(r.keys.size());
  r.values_out.resize(n * 4);
  r.perm_out.resize(n * 4);
  return r;
}

void Point(Request& r) {
  r.job = SortJob{};
  r.job.key_type = r.type;
  r.job.order = r.descending ? Order::kDescending : Order::kAscending;
  r.job.count = r.keys.size() / KeySize(r.type);
  r.job.keys = r.keys.data();
  r.job.value_type = ValueType::kU32;
  r.job.values = r.values.data();
  r.job.keys_out = r.keys_out.data();
  r.job.values_out = r.values_out.data();
  r.job.permutation_out = r.perm_out.data();
}

template <typename K>
void ExpectSortedAlone(const Request& r) {
  const size_t n = r.job.count;
  if (n == 0) return;
  std::vector<K> keys(n);
  std::memcpy(keys.data(), r.keys.data(), n * sizeof(K));
  const std::vector<uint32_t> want =
      testing::RefPermutation(keys, r.descending);
  std::vector<uint32_t> perm(n), values(n);
  std::memcpy(perm.data(), r.perm_out.data(), n * 4);
  std::memcpy(values.data(), r.values_out.data(), n * 4);
  ASSERT_EQ(perm, want) << KeyTypeName(r.type);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(r.keys_out.data() + i * sizeof(K),
                          r.keys.data() + want[i] * sizeof(K), sizeof(K)),
              0)
        << KeyTypeName(r.type) << " key " << i;
    uint32_t v;
    std::memcpy(&v, r.values.data() + want[i] * 4, 4);
    ASSERT_EQ(values[i], v) << KeyTypeName(r.type) << " value " << i;
  }
}

// Points each request at its buffers and sorts them all as one batch.
void SortAsOneBatch(std::vector<Request>& rs) {
  CpuSorter cpu({.threads = 2});
  std::vector<const SortJob*> jobs;
  for (Request& r : rs) {
    Point(r);
    jobs.push_back(&r.job);
  }
  batch::PackBuffer pack;
  ASSERT_TRUE(batch::SortTogether(cpu, jobs, nullptr, &pack).ok());
}

TEST(SortTogether, MixedTypesAndOrdersComeBackAsIfSortedAlone) {
  std::vector<Request> rs;
  rs.push_back(Make<uint32_t>(KeyType::kU32, false, 1000, 1));
  rs.push_back(Make<int32_t>(KeyType::kI32, true, 0, 2));
  rs.push_back(Make<float>(KeyType::kF32, true, 3333, 3));
  rs.push_back(Make<int32_t>(KeyType::kI32, false, 1, 4));
  rs.push_back(Make<float>(KeyType::kF32, false, 70000, 5));
  SortAsOneBatch(rs);
  ExpectSortedAlone<uint32_t>(rs[0]);
  ExpectSortedAlone<int32_t>(rs[1]);
  ExpectSortedAlone<float>(rs[2]);
  ExpectSortedAlone<int32_t>(rs[3]);
  ExpectSortedAlone<float>(rs[4]);
}

TEST(SortTogether, SixtyFourBitKeys) {
  std::vector<Request> rs;
  rs.push_back(Make<double>(KeyType::kF64, true, 5000, 6));
  rs.push_back(Make<int64_t>(KeyType::kI64, false, 4000, 7));
  rs.push_back(Make<uint64_t>(KeyType::kU64, true, 3000, 8));
  SortAsOneBatch(rs);
  ExpectSortedAlone<double>(rs[0]);
  ExpectSortedAlone<int64_t>(rs[1]);
  ExpectSortedAlone<uint64_t>(rs[2]);
}

// The CPU engine, taking at most `max` matrices a call.
class SmallTransposer final : public Sorter {
 public:
  explicit SmallTransposer(size_t max) : cpu_({.threads = 1}), max_(max) {}
  ExecutionPath path() const override { return ExecutionPath::kCpu; }
  std::string device_name() const override { return "small"; }
  absl::Status Sort(const SortJob& job) override { return cpu_.Sort(job); }
  absl::Status Transpose(const TransposeJob& job) override {
    ++calls;
    if (job.count > max_) return absl::InternalError("too many matrices");
    return cpu_.Transpose(job);
  }
  size_t max_transpose_matrices() const override { return max_; }
  int calls = 0;

 private:
  CpuSorter cpu_;
  size_t max_;
};

std::vector<std::byte> RandomMatrices(size_t count, uint64_t seed) {
  std::vector<std::byte> m(count * 128);
  std::mt19937_64 rng(seed);
  for (std::byte& b : m) b = static_cast<std::byte>(rng());
  return m;
}

std::vector<std::byte> TransposedAlone(const std::vector<std::byte>& in) {
  CpuSorter cpu({.threads = 1});
  std::vector<std::byte> out(in.size());
  TransposeJob job{
      .count = in.size() / 128, .in = in.data(), .out = out.data()};
  EXPECT_TRUE(cpu.Transpose(job).ok());
  return out;
}

// Host memory that counts what it hands out, or refuses.
class CountingMemory final : public HostMemory {
 public:
  explicit CountingMemory(bool refuse = false) : refuse(refuse) {}
  void* Allocate(size_t bytes) override {
    if (refuse) return nullptr;
    ++allocations;
    held += bytes;
    return new std::byte[bytes];
  }
  void Free(void* data, size_t bytes) override {
    held -= bytes;
    delete[] static_cast<std::byte*>(data);
  }
  int allocations = 0;
  size_t held = 0;
  bool refuse;
};

TEST(PackBuffer, GrowsInPowersOfTwoFromTheEnginesMemoryAndGivesItBack) {
  auto memory = std::make_shared<CountingMemory>();
  batch::PackBuffer pack;
  std::byte* a = pack.Get(3 << 20, memory);
  EXPECT_EQ(pack.bytes(), size_t{4} << 20);
  EXPECT_EQ(memory->held, size_t{4} << 20);
  EXPECT_EQ(pack.Get(100, memory), a);  // smaller: the same block
  EXPECT_EQ(memory->allocations, 1);
  pack.Get(5 << 20, memory);  // larger: a new block, the old one freed
  EXPECT_EQ(memory->allocations, 2);
  EXPECT_EQ(memory->held, size_t{8} << 20);
  pack.Release();
  EXPECT_EQ(memory->held, 0u);
  EXPECT_EQ(pack.bytes(), 0u);
  // No memory, or memory that has none left: the heap, kept for the next
  // batch while the memory still has none, swapped for the memory's once
  // it has room (page-locked memory is capped).
  auto refusing = std::make_shared<CountingMemory>(/*refuse=*/true);
  std::byte* heap = pack.Get(10, refusing);
  EXPECT_NE(heap, nullptr);
  EXPECT_FALSE(pack.from_memory());
  EXPECT_EQ(pack.Get(10, refusing), heap);
  refusing->refuse = false;
  pack.Get(10, refusing);
  EXPECT_TRUE(pack.from_memory());
  EXPECT_EQ(refusing->held, size_t{1} << 20);
  pack.Release();
  EXPECT_EQ(refusing->held, 0u);
  EXPECT_NE(pack.Get(10, nullptr), nullptr);
  EXPECT_FALSE(pack.from_memory());
  {
    batch::PackBuffer scoped;
    scoped.Get(1, memory);
    EXPECT_EQ(memory->held, size_t{1} << 20);
  }
  EXPECT_EQ(memory->held, 0u);  // given back when the buffer goes
}

TEST(TransposeTogether, EachComesBackAsIfAlone) {
  CpuSorter cpu({.threads = 1});
  std::vector<std::vector<std::byte>> ins, outs;
  for (size_t count : {3, 0, 17, 1}) {
    ins.push_back(RandomMatrices(count, count + 9));
    outs.emplace_back(ins.back().size());
  }
  std::vector<TransposeJob> jobs(ins.size());
  std::vector<const TransposeJob*> ptrs;
  for (size_t i = 0; i < ins.size(); ++i) {
    jobs[i] = {.count = ins[i].size() / 128,
               .in = ins[i].data(),
               .out = outs[i].data()};
    ptrs.push_back(&jobs[i]);
  }
  batch::PackBuffer pack;
  ASSERT_TRUE(batch::TransposeTogether(cpu, ptrs, nullptr, &pack).ok());
  for (size_t i = 0; i < ins.size(); ++i) {
    EXPECT_EQ(outs[i], TransposedAlone(ins[i])) << i;
  }
}

TEST(TransposeInPieces, CutsBetweenMatricesAndCountsThePieces) {
  SmallTransposer engine(4);
  const std::vector<std::byte> in = RandomMatrices(10, 11);
  std::vector<std::byte> out(in.size());
  int runs = 0;
  ASSERT_TRUE(batch::TransposeInPieces(
                  engine, {.count = 10, .in = in.data(), .out = out.data()},
                  nullptr, &runs)
                  .ok());
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(engine.calls, 3);
  EXPECT_EQ(out, TransposedAlone(in));
  // Within the bound: one run.
  runs = 0;
  ASSERT_TRUE(batch::TransposeInPieces(
                  engine, {.count = 4, .in = in.data(), .out = out.data()},
                  nullptr, &runs)
                  .ok());
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace sortd
