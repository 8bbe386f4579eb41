// The compact form of sorted 32-bit keys (core/compact_keys.h) on one
// thread: encoding (order values, then blocks) and decoding (check, unpack,
// back to keys) of sorted random u32 keys, and the bytes a key it takes.
// The server and the client split the blocks over threads; these are the
// per-thread rates.
//
//   build/bench/compact_keys_benchmark --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/compact_keys.h"

namespace sortd {
namespace {

// n random u32 keys in ascending order.
std::vector<uint32_t> SortedKeys(size_t n) {
  std::mt19937 rng(7);
  std::vector<uint32_t> keys(n);
  for (uint32_t& k : keys) k = rng();
  std::sort(keys.begin(), keys.end());
  return keys;
}

struct Compact {
  std::vector<uint8_t> widths;
  std::vector<uint32_t> bases;
  std::vector<uint8_t> deltas;
  size_t count = 0;
  compact::Encoded View() const {
    return {count,
            {reinterpret_cast<const char*>(widths.data()), widths.size()},
            {reinterpret_cast<const char*>(bases.data()), bases.size() * 4},
            {reinterpret_cast<const char*>(deltas.data()), deltas.size()}};
  }
};

Compact Encode(std::vector<uint32_t> values) {
  Compact c;
  c.count = values.size();
  const size_t blocks = compact::Blocks(c.count);
  c.widths.resize(blocks);
  c.bases.resize(blocks);
  c.deltas.resize(blocks * compact::kBlockKeys * 4);
  compact::ToOrderValues(KeyType::kU32, false, values.data(), c.count);
  c.deltas.resize(compact::EncodeBlocks(values.data(), c.count, 0, blocks,
                                        c.widths.data(), c.bases.data(),
                                        c.deltas.data()));
  return c;
}

void BM_Encode(benchmark::State& state) {
  const std::vector<uint32_t> keys = SortedKeys(state.range(0));
  std::vector<uint32_t> work(keys.size());
  const size_t blocks = compact::Blocks(keys.size());
  std::vector<uint8_t> widths(blocks), deltas(blocks * compact::kBlockKeys * 4);
  std::vector<uint32_t> bases(blocks);
  size_t bytes = 0;
  for (auto _ : state) {
    std::memcpy(work.data(), keys.data(), keys.size() * 4);
    compact::ToOrderValues(KeyType::kU32, false, work.data(), work.size());
    bytes = compact::EncodeBlocks(work.data(), work.size(), 0, blocks,
                                  widths.data(), bases.data(), deltas.data());
    benchmark::DoNotOptimize(deltas.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["bytes_per_key"] = static_cast<double>(bytes + blocks * 5) /
                                    static_cast<double>(keys.size());
}

void BM_Decode(benchmark::State& state) {
  const std::vector<uint32_t> keys = SortedKeys(state.range(0));
  const Compact c = Encode(keys);
  const compact::Encoded e = c.View();
  std::vector<uint32_t> out(c.count);
  for (auto _ : state) {
    if (!compact::Check(e).ok()) state.SkipWithError("Check failed");
    compact::UnpackBlocks(e, 0, c.widths.size(), 0, out.data());
    compact::FromOrderValues(KeyType::kU32, false, out.data(), out.size());
    benchmark::DoNotOptimize(out.data());
  }
  if (out != keys) state.SkipWithError("the keys did not round-trip");
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

BENCHMARK(BM_Encode)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->Unit(
    benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 24)->Unit(
    benchmark::kMillisecond);

}  // namespace
}  // namespace sortd

BENCHMARK_MAIN();
