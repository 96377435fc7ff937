// ConstantTimeEquals (serve/http_server.h), the bearer-token check: its time
// must not depend on where a wrong token first differs from the right one,
// or an attacker could guess the token byte by byte from response times.
// Compare the three cases: they should take the same time within noise.
#include <string>

#include "benchmark/benchmark.h"
#include "serve/http_server.h"

namespace bubblewatch {
namespace {

const std::string& Expected() {
  static const std::string token(64, 'k');
  return token;
}

// arg: the index of the first wrong byte (64 = the right token).
void BM_ConstantTimeEquals(benchmark::State& state) {
  std::string given = Expected();
  const int at = static_cast<int>(state.range(0));
  if (at < static_cast<int>(given.size())) given[at] = 'x';
  for (auto _ : state) {
    benchmark::DoNotOptimize(given);
    bool equal = ConstantTimeEquals(given, Expected());
    benchmark::DoNotOptimize(equal);
  }
}
BENCHMARK(BM_ConstantTimeEquals)->Arg(0)->Arg(32)->Arg(63)->Arg(64);

}  // namespace
}  // namespace bubblewatch

BENCHMARK_MAIN();
