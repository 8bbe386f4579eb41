// The CPU path against the two sorts a C++ programmer would reach for:
// std::stable_sort (stable, one thread) and tbb::parallel_sort (parallel,
// not stable). All three sort the same random keys; the std and TBB runs
// include copying the input into the buffer they sort in place, which is
// comparable to CpuSorter's decode and encode passes.
//
// CpuSorter's runs also report `faults`: minor page faults per timed sort,
// after one untimed sort by the same sorter.
//
//   build/bench/cpu_sort_benchmark --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_sorter.h"
#include "oneapi/tbb/info.h"
#include "oneapi/tbb/parallel_sort.h"

namespace sortd {
namespace {

template <typename K>
std::vector<K> RandomKeys(size_t n) {
  std::mt19937_64 rng(42);
  std::vector<K> v(n);
  for (K& k : v) {
    if constexpr (std::is_floating_point_v<K>) {
      k = static_cast<K>(
          std::uniform_real_distribution<double>(-1e6, 1e6)(rng));
    } else {
      k = static_cast<K>(rng());
    }
  }
  return v;
}

// Minor page faults of this process so far.
double MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_minflt);
}

template <typename K>
constexpr KeyType TypeOf() {
  if constexpr (std::is_same_v<K, uint32_t>) return KeyType::kU32;
  if constexpr (std::is_same_v<K, float>) return KeyType::kF32;
  if constexpr (std::is_same_v<K, uint64_t>) return KeyType::kU64;
  return KeyType::kF64;
}

template <typename K>
void BM_CpuSorter(benchmark::State& state, bool permutation) {
  const size_t n = state.range(0);
  const std::vector<K> keys = RandomKeys<K>(n);
  std::vector<K> out(n);
  std::vector<uint32_t> perm(n);
  CpuSorter sorter({.threads = 0});
  SortJob job{.key_type = TypeOf<K>(),
              .count = n,
              .keys = reinterpret_cast<const std::byte*>(keys.data()),
              .keys_out = reinterpret_cast<std::byte*>(out.data()),
              .permutation_out = permutation
                                     ? reinterpret_cast<std::byte*>(perm.data())
                                     : nullptr};
  // One sort before the timed ones: sortd's sorter lives on, and its
  // sorts take scratch that earlier ones left in its pool (decision 016);
  // the first sort of a fresh sorter faults every page of it in.
  if (!sorter.Sort(job).ok()) {
    state.SkipWithError("the untimed first sort failed");
    return;
  }
  const double faults_before = MinorFaults();
  for (auto _ : state) {
    benchmark::DoNotOptimize(sorter.Sort(job));
    benchmark::ClobberMemory();
  }
  state.counters["faults"] = benchmark::Counter(
      MinorFaults() - faults_before, benchmark::Counter::kAvgIterations);
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["threads"] = sorter.threads();
}

template <typename K>
void BM_StdStableSort(benchmark::State& state) {
  const size_t n = state.range(0);
  const std::vector<K> keys = RandomKeys<K>(n);
  std::vector<K> work(n);
  for (auto _ : state) {
    std::memcpy(work.data(), keys.data(), n * sizeof(K));
    std::stable_sort(work.begin(), work.end());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

template <typename K>
void BM_TbbParallelSort(benchmark::State& state) {
  const size_t n = state.range(0);
  const std::vector<K> keys = RandomKeys<K>(n);
  std::vector<K> work(n);
  for (auto _ : state) {
    std::memcpy(work.data(), keys.data(), n * sizeof(K));
    tbb::parallel_sort(work.begin(), work.end());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["threads"] = tbb::info::default_concurrency();
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int k : {10, 14, 17, 20, 22, 24}) b->Arg(int64_t{1} << k);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_CpuSorterU32(benchmark::State& s) { BM_CpuSorter<uint32_t>(s, false); }
void BM_CpuSorterU64(benchmark::State& s) { BM_CpuSorter<uint64_t>(s, false); }
void BM_CpuSorterF32(benchmark::State& s) { BM_CpuSorter<float>(s, false); }
void BM_CpuSorterF32Argsort(benchmark::State& s) {
  BM_CpuSorter<float>(s, true);
}

BENCHMARK(BM_CpuSorterU32)->Apply(Sizes);
BENCHMARK(BM_StdStableSort<uint32_t>)->Apply(Sizes);
BENCHMARK(BM_TbbParallelSort<uint32_t>)->Apply(Sizes);
BENCHMARK(BM_CpuSorterU64)->Apply(Sizes);
BENCHMARK(BM_StdStableSort<uint64_t>)->Apply(Sizes);
BENCHMARK(BM_TbbParallelSort<uint64_t>)->Apply(Sizes);
BENCHMARK(BM_CpuSorterF32)->Apply(Sizes);
BENCHMARK(BM_CpuSorterF32Argsort)->Apply(Sizes);
BENCHMARK(BM_StdStableSort<float>)->Apply(Sizes);
BENCHMARK(BM_TbbParallelSort<float>)->Apply(Sizes);

}  // namespace
}  // namespace sortd

BENCHMARK_MAIN();
