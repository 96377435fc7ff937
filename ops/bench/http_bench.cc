// The HTTP server under hostile and heavy load, measured
// on loopback against a real `bubblewatch serve` (docs/http.md):
//   slow      S connections held open, half idle, half trickling a request one
//             header line every 2 s; meanwhile fresh clients GET /healthz and
//             /metrics one after another: answered, within 100 ms, latency
//   flood     N GET /healthz over K keep-alive connections at once, and
//             N2 more on a new connection each (K at a time): p50/p99/max
//   keepalive R GET /healthz one after another on one connection
//   pipeline  3 requests in one write: responses
// Everything is bounded: requests time out, each phase stops after
// --phase_limit, and a watchdog ends the program after --total_limit.
//
//   build/ops/bench/http_bench                       # serve from build/
//   build/ops/bench/http_bench --serve=/path/to/bubblewatch
//   build/ops/bench/http_bench --url=http://127.0.0.1:8080  # a running one
//
// Only 127.0.0.1 is contacted. Exit status 0 when every target was met, 1
// when one was not, 2 on a usage or setup error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

struct Options {
  std::string url;    // A running server; empty: start one.
  std::string serve;  // The bubblewatch binary to start.
  int slow = 50;
  int probes = 20;
  int flood = 20000;
  int flood_new = 10000;
  int connections = 50;
  int keepalive = 500;
  // Per request: long enough that a SYN retransmission (1 s) shows as
  // latency, not as a failure.
  absl::Duration timeout = absl::Seconds(5);
  // Per fresh client beside the slow ones.
  absl::Duration probe_timeout = absl::Seconds(1);
  absl::Duration phase_limit = absl::Seconds(40);
  absl::Duration total_limit = absl::Minutes(4);
};

// The project's targets (docs/http.md).
constexpr absl::Duration kFreshTarget = absl::Milliseconds(100);
constexpr absl::Duration kFloodP99Target = absl::Milliseconds(50);

[[noreturn]] void Fail(const std::string& what) {
  absl::FPrintF(stderr, "http_bench: %s\n", what);
  std::exit(2);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// Nearest-rank percentile of sorted `v`.
absl::Duration Percentile(const std::vector<absl::Duration>& v, double q) {
  if (v.empty()) return absl::InfiniteDuration();
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size()));
  return v[std::min(v.size() - 1, i)];
}

// A blocking loopback socket whose every operation is bounded by a deadline.
class Socket {
 public:
  Socket() = default;
  ~Socket() { Close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool Connect(int port, absl::Time deadline) {
    Close();
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return false;
    // The client's own Nagle must not be what is measured.
    int yes = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      return true;
    }
    if (errno != EINPROGRESS || !Wait(POLLOUT, deadline)) return false;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    return err == 0;
  }

  bool Send(absl::string_view data, absl::Time deadline) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && errno == EAGAIN) {
        if (!Wait(POLLOUT, deadline)) return false;
      } else if (n < 0 && errno != EINTR) {
        return false;
      }
    }
    return true;
  }

  // Reads one response; returns its status, or nullopt when the connection
  // ends or the deadline passes first. `*closing`: it said Connection: close.
  std::optional<int> ReadResponse(absl::Time deadline, bool* closing) {
    for (;;) {
      const size_t head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const absl::string_view head(buffer_.data(), head_end);
        int status = 0;
        if (head.size() < 12 || !absl::SimpleAtoi(head.substr(9, 3), &status)) {
          return std::nullopt;
        }
        size_t length = 0;
        *closing = false;
        size_t pos = 0;
        while (pos < head.size()) {
          size_t eol = head.find("\r\n", pos);
          if (eol == absl::string_view::npos) eol = head.size();
          const absl::string_view line = head.substr(pos, eol - pos);
          if (absl::StartsWithIgnoreCase(line, "content-length:")) {
            absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)),
                             &length);
          } else if (absl::StartsWithIgnoreCase(line, "connection:") &&
                     absl::StrContains(absl::AsciiStrToLower(line), "close")) {
            *closing = true;
          }
          pos = eol + 2;
        }
        if (buffer_.size() >= head_end + 4 + length) {
          buffer_.erase(0, head_end + 4 + length);
          return status;
        }
      }
      char chunk[16384];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n > 0) {
        buffer_.append(chunk, static_cast<size_t>(n));
      } else if (n < 0 && errno == EAGAIN) {
        if (!Wait(POLLIN, deadline)) return std::nullopt;
      } else if (n == 0 || errno != EINTR) {
        return std::nullopt;
      }
    }
  }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    buffer_.clear();
  }
  bool open() const { return fd_ >= 0; }

 private:
  bool Wait(short events, absl::Time deadline) {
    for (;;) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      pollfd p{.fd = fd_, .events = events, .revents = 0};
      const int r = poll(&p, 1,
                         static_cast<int>(absl::ToInt64Milliseconds(
                             absl::Ceil(left, absl::Milliseconds(1)))));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  int fd_ = -1;
  std::string buffer_;
};

// Never "Connection: close": a client that wants one response closes the
// connection itself once it has it. Asked to close, the server closes first
// and the TIME_WAIT is on its side, where a later connection from the same
// client port (tens of thousands of them in a flood wrap around the
// ephemeral ports) may have its SYN ignored for a second; on the client's
// side Linux reuses such loopback ports safely (tcp_tw_reuse=2).
std::string Request(absl::string_view path) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

// One request on a new connection: the time from connect to the whole
// response, or nullopt if it failed or took longer than `timeout`.
std::optional<absl::Duration> FreshGet(int port, absl::string_view path,
                                       absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  Socket s;
  bool closing = false;
  if (!s.Connect(port, deadline) || !s.Send(Request(path), deadline)) {
    return std::nullopt;
  }
  std::optional<int> status = s.ReadResponse(deadline, &closing);
  if (!status || *status != 200) return std::nullopt;
  return absl::Now() - start;
}

bool met_all = true;

void Verdict(bool met, absl::string_view target) {
  met_all = met_all && met;
  absl::PrintF("    target %s: %s\n", target, met ? "met" : "NOT MET");
}

// "1.23 ms", or "-" for no figure.
std::string MsText(absl::Duration d) {
  return d == absl::InfiniteDuration() ? "-"
                                       : absl::StrFormat("%.2f ms", Ms(d));
}

void PrintLatencies(absl::string_view what, std::vector<absl::Duration>& v,
                    int failed, absl::Duration wall) {
  std::sort(v.begin(), v.end());
  absl::PrintF(
      "  %s: %d ok, %d failed or over the timeout; p50 %s, p99 %s, max %s; "
      "%.0f requests/s\n",
      what, v.size(), failed, MsText(Percentile(v, 0.5)),
      MsText(Percentile(v, 0.99)), MsText(Percentile(v, 1.0)),
      static_cast<double>(v.size()) / absl::ToDoubleSeconds(wall));
}

void SlowClients(int port, const Options& o) {
  absl::PrintF(
      "slow clients: %d connections (%d idle, %d sending a header line every "
      "2 s); fresh clients one after another, %s timeout each\n",
      o.slow, o.slow / 2, o.slow - o.slow / 2,
      absl::FormatDuration(o.probe_timeout));
  std::vector<std::unique_ptr<Socket>> slow;
  const absl::Time setup_deadline = absl::Now() + absl::Seconds(5);
  for (int i = 0; i < o.slow; ++i) {
    slow.push_back(std::make_unique<Socket>());
    if (!slow.back()->Connect(port, setup_deadline)) {
      absl::PrintF("  slow connection %d: not connected\n", i);
    }
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    int line = 0;
    absl::Time next = absl::Now();
    while (!done.load()) {
      if (absl::Now() >= next) {
        for (size_t i = 1; i < slow.size(); i += 2) {
          const std::string text =
              line == 0 ? "GET /healthz HTTP/1.1\r\n"
                        : absl::StrCat("X-Slow-", line, ": 1\r\n");
          slow[i]->Send(text, absl::Now() + absl::Milliseconds(100));
        }
        ++line;
        next += absl::Seconds(2);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  absl::SleepFor(absl::Milliseconds(200));  // The slow ones settle in.
  const absl::Time phase_end = absl::Now() + o.phase_limit;
  for (const char* path : {"/healthz", "/metrics"}) {
    std::vector<absl::Duration> ok;
    int within = 0;
    int tried = 0;
    for (; tried < o.probes && absl::Now() < phase_end; ++tried) {
      if (std::optional<absl::Duration> d =
              FreshGet(port, path, o.probe_timeout)) {
        ok.push_back(*d);
        within += *d <= kFreshTarget;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    std::sort(ok.begin(), ok.end());
    absl::PrintF(
        "  fresh GET %s: %d/%d answered, %d within 100 ms; p50 %s, max %s\n",
        path, ok.size(), tried, within, MsText(Percentile(ok, 0.5)),
        MsText(Percentile(ok, 1.0)));
    if (std::string_view(path) == "/healthz") {
      Verdict(tried > 0 && within == tried,
              "every fresh /healthz within 100 ms");
    }
  }
  done.store(true);
  trickle.join();
}

// `total` requests over `connections` clients at once, keep-alive or a new
// connection each; per-request latencies.
void Flood(int port, const Options& o, int total, bool keep_alive) {
  std::mutex mu;
  std::vector<absl::Duration> all;
  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  const absl::Time start = absl::Now();
  const absl::Time phase_end = start + o.phase_limit;
  std::vector<std::thread> clients;
  for (int c = 0; c < o.connections; ++c) {
    clients.emplace_back([&] {
      std::vector<absl::Duration> mine;
      Socket s;
      const std::string request = Request("/healthz");
      while (next.fetch_add(1) < total && absl::Now() < phase_end) {
        const absl::Time t0 = absl::Now();
        const absl::Time deadline = t0 + o.timeout;
        bool closing = true;
        std::optional<int> status;
        if ((s.open() || s.Connect(port, deadline)) &&
            s.Send(request, deadline)) {
          status = s.ReadResponse(deadline, &closing);
        }
        if (status == 200) {
          mine.push_back(absl::Now() - t0);
        } else {
          failed.fetch_add(1);
        }
        if (!keep_alive || closing || !status) s.Close();
      }
      std::lock_guard<std::mutex> lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (std::thread& t : clients) t.join();
  const absl::Duration wall = absl::Now() - start;
  const std::string what = absl::StrFormat(
      "flood, %d GET /healthz over %d %s", total, o.connections,
      keep_alive ? "keep-alive connections" : "clients, a new connection each");
  PrintLatencies(what, all, failed.load(), wall);
  Verdict(failed.load() == 0 && Percentile(all, 0.99) < kFloodP99Target,
          "p99 < 50 ms, none failed");
}

void KeepAlive(int port, const Options& o) {
  Socket s;
  std::vector<absl::Duration> later;
  int failed = 0;
  int reconnects = 0;
  const absl::Time start = absl::Now();
  const absl::Time phase_end = start + o.phase_limit;
  const std::string request = Request("/healthz");
  for (int i = 0; i < o.keepalive && absl::Now() < phase_end; ++i) {
    const absl::Time t0 = absl::Now();
    const absl::Time deadline = t0 + o.timeout;
    bool closing = true;
    const bool fresh = !s.open();
    reconnects += fresh && i > 0;
    std::optional<int> status;
    if ((s.open() || s.Connect(port, deadline)) && s.Send(request, deadline)) {
      status = s.ReadResponse(deadline, &closing);
    }
    if (status != 200) {
      ++failed;
    } else if (!fresh) {
      later.push_back(absl::Now() - t0);
    }
    if (closing || !status) s.Close();
  }
  PrintLatencies(
      absl::StrFormat("keep-alive, %d GET /healthz one after another on one "
                      "connection (the requests after a connection's first; "
                      "%d reconnections)",
                      o.keepalive, reconnects),
      later, failed, absl::Now() - start);
  Verdict(failed == 0 && Percentile(later, 0.99) < absl::Milliseconds(5),
          "p99 < 5 ms (no Nagle/delayed-ACK stall)");
}

void Pipeline(int port, const Options& o) {
  Socket s;
  const absl::Time deadline = absl::Now() + o.timeout;
  int answered = 0;
  if (s.Connect(port, deadline) &&
      s.Send(absl::StrCat(Request("/healthz"), Request("/healthz"),
                          Request("/healthz")),
             deadline)) {
    bool closing = false;
    while (answered < 3 && s.ReadResponse(deadline, &closing) == 200) {
      ++answered;
    }
  }
  absl::PrintF("pipelining: 3 requests in one write, %d responses\n", answered);
  Verdict(answered == 3, "3 responses");
}

// Starts `binary serve` over an empty store in `dir`; returns its pid and
// sets `port` from the line it prints.
pid_t StartServer(const std::string& binary, const std::string& dir,
                  int* port) {
  {
    auto store = OpenRocksDbWindowStore(dir + "/store");
    if (!store.ok()) Fail(store.status().ToString());
  }
  int err[2];
  if (pipe(err) != 0) Fail("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    close(err[1]);
    const std::string store = dir + "/store";
    execl(binary.c_str(), binary.c_str(), "serve", "--store", store.c_str(),
          "--listen", "127.0.0.1:0", "--log-level", "warn",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err[1]);
  std::string text;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const std::string marker = "listening on http://127.0.0.1:";
  while (absl::Now() < deadline) {
    pollfd p{.fd = err[0], .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char chunk[1024];
    const ssize_t n = read(err[0], chunk, sizeof(chunk));
    if (n <= 0) break;
    text.append(chunk, static_cast<size_t>(n));
    const size_t at = text.find(marker);
    if (at == std::string::npos) continue;
    const size_t end = text.find_first_not_of("0123456789", at + marker.size());
    if (end == std::string::npos) continue;
    if (absl::SimpleAtoi(
            text.substr(at + marker.size(), end - at - marker.size()), port)) {
      // Its later messages are not read; the pipe buffer holds plenty.
      return pid;
    }
  }
  kill(pid, SIGKILL);
  Fail(absl::StrCat(binary, " serve did not come up: ", text));
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const std::string value(eq == absl::string_view::npos ? ""
                                                          : arg.substr(eq + 1));
    auto number = [&](int* out) {
      if (!absl::SimpleAtoi(value, out) || *out < 0) {
        Fail(absl::StrCat("bad ", arg));
      }
    };
    auto duration = [&](absl::Duration* out) {
      if (!absl::ParseDuration(value, out)) Fail(absl::StrCat("bad ", arg));
    };
    if (name == "--url") {
      o.url = value;
    } else if (name == "--serve") {
      o.serve = value;
    } else if (name == "--slow") {
      number(&o.slow);
    } else if (name == "--probes") {
      number(&o.probes);
    } else if (name == "--flood") {
      number(&o.flood);
    } else if (name == "--flood_new") {
      number(&o.flood_new);
    } else if (name == "--connections") {
      number(&o.connections);
    } else if (name == "--keepalive") {
      number(&o.keepalive);
    } else if (name == "--timeout") {
      duration(&o.timeout);
    } else if (name == "--probe_timeout") {
      duration(&o.probe_timeout);
    } else if (name == "--phase_limit") {
      duration(&o.phase_limit);
    } else {
      Fail(absl::StrCat(
          "unknown ", arg,
          "\nusage: http_bench [--serve=BINARY | --url=http://127.0.0.1:PORT] "
          "[--slow=50] [--probes=20] [--flood=20000] [--flood_new=10000] "
          "[--connections=50] [--keepalive=500] [--timeout=5s] "
          "[--probe_timeout=1s] "
          "[--phase_limit=40s]"));
    }
  }
  return o;
}

int Main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  int port = 0;
  pid_t server = -1;
  std::string dir;
  if (!o.url.empty()) {
    absl::string_view url = o.url;
    if (!absl::ConsumePrefix(&url, "http://127.0.0.1:") ||
        !absl::SimpleAtoi(url, &port)) {
      Fail("--url must be http://127.0.0.1:PORT (loopback only)");
    }
  } else {
    if (o.serve.empty()) {
      // build/ops/bench/http_bench -> build/bubblewatch
      o.serve = (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
                 "../../bubblewatch")
                    .lexically_normal()
                    .string();
    }
    char tmpl[] = "/tmp/http_bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Fail("mkdtemp");
    dir = tmpl;
    server = StartServer(o.serve, dir, &port);
    absl::PrintF("server: %s serve, empty store, 127.0.0.1:%d\n", o.serve,
                 port);
  }
  // Bounded whatever the server does.
  std::thread([limit = o.total_limit, server] {
    absl::SleepFor(limit);
    absl::FPrintF(stderr, "http_bench: over %s, stopping\n",
                  absl::FormatDuration(limit));
    if (server > 0) kill(server, SIGKILL);
    std::_Exit(2);
  }).detach();
  absl::PrintF("machine: %d cores, load %s",
               std::thread::hardware_concurrency(), [] {
                 std::FILE* f = std::fopen("/proc/loadavg", "r");
                 char line[128] = "?\n";
                 if (f != nullptr) {
                   if (std::fgets(line, sizeof(line), f) == nullptr) {
                     line[0] = '\0';
                   }
                   std::fclose(f);
                 }
                 return std::string(line);
               }());

  if (o.slow > 0) SlowClients(port, o);
  if (o.flood > 0) Flood(port, o, o.flood, /*keep_alive=*/true);
  if (o.flood_new > 0) Flood(port, o, o.flood_new, /*keep_alive=*/false);
  if (o.keepalive > 0) KeepAlive(port, o);
  Pipeline(port, o);

  if (server > 0) {
    kill(server, SIGTERM);
    int status = 0;
    waitpid(server, &status, 0);
    std::filesystem::remove_all(dir);
  }
  absl::PrintF("%s\n", met_all ? "all targets met" : "some targets NOT met");
  return met_all ? 0 : 1;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) { return bubblewatch::Main(argc, argv); }
