// Sorts three keys through the sortd at argv[1] with the installed client
// library; prints them. Exit 0 only if the answer is sorted.
#include <cstdio>
#include <vector>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer HOST:PORT\n");
    return 2;
  }
  auto client = sortd::Client::Create(argv[1]);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  auto sorted = (*client)->Sort<int>(std::vector<int>{3, -1, 2});
  if (!sorted.ok()) {
    std::fprintf(stderr, "%s\n", sorted.status().ToString().c_str());
    return 1;
  }
  for (int k : sorted->keys) std::printf("%d ", k);
  std::printf("\n");
  return sorted->keys == std::vector<int>{-1, 2, 3} ? 0 : 1;
}
