// The stop signals (server/shutdown.h): once blocked, SIGTERM and SIGINT
// reach the thread waiting for them, threads started after have them
// blocked too, and they never end the process.
#include "server/shutdown.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <thread>

#include "absl/cleanup/cleanup.h"

namespace sortd {
namespace {

TEST(Shutdown, BlockedStopSignalsAreTakenByTheWaiter) {
  sigset_t before;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &before), 0);
  // Both signals are taken below; the tests after this one in the same
  // process get their Ctrl-C back.
  absl::Cleanup restore = [&] {
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
  };
  BlockStopSignals();
  sigset_t blocked;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &blocked), 0);
  EXPECT_TRUE(sigismember(&blocked, SIGTERM));
  EXPECT_TRUE(sigismember(&blocked, SIGINT));
  // A thread started after has them blocked too, so that none but the
  // waiter takes them; the waiter's comes through.
  const pthread_t waiter = pthread_self();
  std::thread([waiter] {
    sigset_t mask;
    EXPECT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
    EXPECT_TRUE(sigismember(&mask, SIGTERM));
    EXPECT_TRUE(sigismember(&mask, SIGINT));
    EXPECT_EQ(pthread_kill(waiter, SIGTERM), 0);
  }).join();
  EXPECT_EQ(WaitForStopSignal(), SIGTERM);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ(WaitForStopSignal(), SIGINT);
}

}  // namespace
}  // namespace sortd
