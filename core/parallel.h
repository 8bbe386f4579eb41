// The product's one way into oneTBB's loops and arenas: parallel::For,
// parallel::ForRange and parallel::Execute are tbb::parallel_for and
// tbb::task_arena::execute, plus what ThreadSanitizer needs to see them.
//
// Debian's libtbb is not built with ThreadSanitizer, so the hand-over of a
// loop's body to oneTBB's workers and their join are invisible to it: the
// caller's writes before the loop (a request's keys, locals on its stack)
// look racy to the workers that read them, and the workers' writes look
// racy to the caller after the loop. Each report is built before any
// suppression can drop it, and on a 1M-key sort that takes longer than
// the call's deadline. Under ThreadSanitizer the wrappers announce the
// hand-overs oneTBB makes: the caller releases before the loop and each
// body acquires it as it starts; each body releases as it ends and the
// caller acquires after the loop. The two edges use two addresses, so
// that no body is ordered after another: races between bodies are still
// reported. In other builds the wrappers are the plain calls.
//
//   parallel::For(size_t{0}, chunks, [&](size_t c) { ... });
//   parallel::ForRange(tbb::blocked_range<size_t>(0, n, grain),
//                      [&](const tbb::blocked_range<size_t>& r) { ... });
//   parallel::Execute(arena, [&] { ... });
//
// scripts/thread-safety.sh fails on a tbb::parallel_for or an
// arena's execute outside this header.
#ifndef SORTD_CORE_PARALLEL_H_
#define SORTD_CORE_PARALLEL_H_

#include <utility>

#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"

#if defined(__SANITIZE_THREAD__)
#define SORTD_PARALLEL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SORTD_PARALLEL_TSAN 1
#endif
#endif

#ifdef SORTD_PARALLEL_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace sortd::parallel {
namespace internal {

// The two edges of one hand-over: the caller to the bodies (`start`) and
// the bodies to the caller (`end`). Empty outside ThreadSanitizer.
class HandOver {
 public:
#ifdef SORTD_PARALLEL_TSAN
  void Give() { __tsan_release(&start_); }
  void Take() { __tsan_acquire(&start_); }
  void Done() { __tsan_release(&end_); }
  void Join() { __tsan_acquire(&end_); }

 private:
  char start_ = 0, end_ = 0;
#else
  void Give() {}
  void Take() {}
  void Done() {}
  void Join() {}
#endif
};

}  // namespace internal

// tbb::parallel_for(first, last, body): body(i) for i in [first, last).
template <typename Index, typename Body>
void For(Index first, Index last, const Body& body) {
  internal::HandOver h;
  h.Give();
  tbb::parallel_for(first, last, [&](Index i) {
    h.Take();
    body(i);
    h.Done();
  });
  h.Join();
}

// tbb::parallel_for(range, body): body(sub-range) over the range's pieces.
template <typename Range, typename Body>
void ForRange(const Range& range, const Body& body) {
  internal::HandOver h;
  h.Give();
  tbb::parallel_for(range, [&](const Range& r) {
    h.Take();
    body(r);
    h.Done();
  });
  h.Join();
}

// arena.execute(f), which may run f on one of the arena's threads.
template <typename F>
decltype(auto) Execute(tbb::task_arena& arena, F&& f) {
  internal::HandOver h;
  h.Give();
  struct Joined {
    internal::HandOver& h;
    ~Joined() { h.Join(); }
  } joined{h};
  return arena.execute([&]() -> decltype(auto) {
    h.Take();
    struct Done {
      internal::HandOver& h;
      ~Done() { h.Done(); }
    } done{h};
    return std::forward<F>(f)();
  });
}

}  // namespace sortd::parallel

#endif  // SORTD_CORE_PARALLEL_H_
