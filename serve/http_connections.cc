#include "serve/http_connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/logging.h"

namespace bubblewatch {
namespace {

// A request head (request line and headers) longer than this is answered
// from what arrived (httplib refuses it: 414 or 400) and the connection
// closed. httplib itself allows 8 KiB of URI and of each header line.
constexpr size_t kMaxHeadBytes = 32 * 1024;
constexpr size_t kRecvChunk = 16 * 1024;
// After the last response on a connection the server stops writing and
// reads what the client still sends, at most this long, before closing:
// closing with unread input makes the kernel send a reset, which can destroy
// the response before the client has read it (a refused 64 KiB body).
constexpr absl::Duration kLingerTimeout = absl::Seconds(1);

// Where a request ends, by HTTP/1.1's framing: the head up to its empty line,
// then Content-Length bytes of body.
struct Framing {
  enum State { kIncomplete, kComplete, kOversized };
  State state = kIncomplete;
  size_t end = 0;  // The request's bytes (kComplete, kOversized).
  // Whether the connection must close after the answer: the request's end is
  // not known (a chunked body, or one refused unread) or it was cut short.
  bool close_after = false;
};

// Frames the request at the start of a buffer as its bytes arrive. Each call
// scans only what came since the last one, so a client sending a byte at a
// time costs linear work, not quadratic.
class RequestFramer {
 public:
  // `data`: the buffer from the request's first byte, grown since the last
  // call (or the same).
  Framing Next(absl::string_view data, size_t max_body_bytes) {
    while (!head_end_) {
      const size_t newline = data.find('\n', std::max(line_, searched_));
      if (newline == absl::string_view::npos || newline >= kMaxHeadBytes) {
        if (data.size() < kMaxHeadBytes) {
          searched_ = data.size();
          return {};
        }
        return {Framing::kOversized, kMaxHeadBytes, true};
      }
      const absl::string_view line = data.substr(line_, newline + 1 - line_);
      line_ = newline + 1;
      if (!request_line_seen_) {
        request_line_seen_ = true;
        continue;
      }
      // httplib, too, ends the head at the first line that is just CRLF.
      if (line == "\r\n") {
        head_end_ = line_;
        break;
      }
      uint64_t n = 0;
      if (absl::StartsWithIgnoreCase(line, "content-length:") && !length_ &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &n)) {
        length_ = n;
      } else if (absl::StartsWithIgnoreCase(line, "transfer-encoding:")) {
        chunked_ = true;
      }
    }
    const uint64_t body = length_.value_or(0);
    if (chunked_ || body > max_body_bytes) {
      return {Framing::kComplete, *head_end_, true};
    }
    if (data.size() - *head_end_ < body) return {};
    return {Framing::kComplete, *head_end_ + body, false};
  }

  // For the next request.
  void Reset() { *this = RequestFramer(); }

 private:
  size_t line_ = 0;      // Where the first line not yet read starts.
  size_t searched_ = 0;  // No newline from line_ up to here.
  bool request_line_seen_ = false;
  std::optional<size_t> head_end_;
  std::optional<uint64_t> length_;
  bool chunked_ = false;
};

bool IpAndPort(const sockaddr_storage& addr, std::string* ip, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    *port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof(text));
    *port = ntohs(a.sin6_port);
  } else {
    return false;
  }
  *ip = text;
  return true;
}

// httplib's accept loop hands each accepted socket to a task queue; this one
// runs the task (PollingServer::process_and_close_socket, which only queues
// the socket for the poll thread) at once on the accept thread.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

struct PollingServer::Connection {
  enum class State {
    kIdle,       // No request under way.
    kReading,    // Part of a request has arrived.
    kAnswering,  // With a worker.
    kWriting,    // A response waits for the client to take it.
    kDraining,   // Answered for the last time; reading what the client sends.
  };

  Connection(int fd, std::atomic<int>* open) : fd(fd), open(open) {}
  ~Connection() {
    close(fd);
    open->fetch_sub(1);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void Enter(State s, absl::Time now, absl::Duration timeout) {
    state = s;
    since = now;
    deadline = now + timeout;
  }

  // Sends what it can of `out` without blocking; false if the connection
  // failed.
  bool Flush() {
    while (sent < out.size()) {
      const ssize_t n = send(fd, out.data() + sent, out.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        return false;
      }
      sent += static_cast<size_t>(n);
    }
    out.clear();
    sent = 0;
    return true;
  }

  const int fd;
  std::atomic<int>* const open;
  State state = State::kIdle;
  absl::Time since;
  absl::Time deadline;
  std::string in;        // Received and not yet answered.
  RequestFramer framer;  // For the request at the start of `in`.
  std::string out;       // Answered and not yet sent, from out[sent].
  size_t sent = 0;
  int requests = 0;
  bool close_after = false;
  bool failed = false;
};

namespace {

// One request, whole in memory, as the httplib::Stream process_request
// reads it from; the response goes to the connection's output buffer. Reads
// never wait: a read past the request's end (httplib wanting more than the
// framing gave it) returns end-of-stream and is remembered.
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(absl::string_view request, int fd, std::string* out)
      : request_(request), fd_(fd), out_(out) {}

  bool is_readable() const override { return pos_ < request_.size(); }
  bool is_writable() const override { return true; }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ >= request_.size()) {
      ran_out_ = true;
      return 0;
    }
    const size_t n = std::min(size, request_.size() - pos_);
    std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    out_->append(ptr, size);
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        !IpAndPort(addr, &ip, &port)) {
      ip.clear();
      port = 0;
    }
  }

  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        !IpAndPort(addr, &ip, &port)) {
      ip.clear();
      port = 0;
    }
  }

  socket_t socket() const override { return fd_; }

  bool ran_out() const { return ran_out_; }

 private:
  const absl::string_view request_;
  const int fd_;
  std::string* const out_;
  size_t pos_ = 0;
  bool ran_out_ = false;
};

}  // namespace

PollingServer::PollingServer(const ConnectionLimits& limits) : limits_(limits) {
  new_task_queue = [] { return new InlineQueue; };
  // SO_REUSEADDR only: a restarted server may bind while connections of the
  // previous one are in TIME_WAIT, but not while another socket listens
  // there. httplib's default adds SO_REUSEPORT, which lets any number of
  // servers share the port and the kernel spread connections among them.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Only for the Keep-Alive header httplib writes; Settle enforces both.
  set_keep_alive_timeout(
      std::max<time_t>(1, absl::ToInt64Seconds(limits_.keep_alive_timeout)));
  set_keep_alive_max_count(
      static_cast<size_t>(limits_.max_requests_per_connection));
  set_payload_max_length(limits_.max_body_bytes);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

PollingServer::~PollingServer() {
  StopThreads();
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::StatusOr<int> PollingServer::Bind(const std::string& host, int port) {
  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = bind_to_any_port(host);
  } else if (bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host, ":", port, ": ",
        err == EADDRINUSE ? "address already in use (another server?)"
        : err != 0        ? std::strerror(err)
                          : "address not available (not local?)"));
  }
  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled
  // into Debian's library): a burst of connections overflowed it and waited
  // out SYN retransmissions (1 s, then 3 s). On Linux, listen() on a
  // listening socket only sets a new backlog (capped by net.core.somaxconn).
  if (::listen(svr_sock_, SOMAXCONN) != 0) {
    spdlog::warn("HTTP: cannot raise the listen backlog: {}",
                 std::strerror(errno));
  }
  return bound;
}

bool PollingServer::Listen() {
  if (wake_fd_ < 0) {
    spdlog::error("HTTP: eventfd: {}", std::strerror(errno));
    return false;
  }
  poller_ = std::thread([this] { PollLoop(); });
  for (int i = 0; i < std::max(1, limits_.workers); ++i) {
    workers_.emplace_back([this] { WorkLoop(); });
  }
  const bool ok = listen_after_bind();
  StopThreads();
  return ok;
}

void PollingServer::StopThreads() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  for (std::thread& w : workers_) w.join();
  workers_.clear();
  if (poller_.joinable()) poller_.join();
  // What is left was never answered or answered during the stop.
  absl::MutexLock lock(&mu_);
  for (int fd : accepted_) close(fd);
  accepted_.clear();
  ready_.clear();
  answered_.clear();
}

bool PollingServer::process_and_close_socket(socket_t sock) {
  // The poll thread and the workers never block on the socket.
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  // A response goes out in one or two segments (headers, body) and pipelined
  // ones back to back: with Nagle the second waited for the client's delayed
  // ACK, 40 ms on Linux, on every keep-alive request.
  int yes = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(sock);
      return false;
    }
    accepted_.push_back(sock);
  }
  Wake();
  return true;
}

void PollingServer::Wake() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN: the counter is full, so the poll thread is awake anyway.
  }
}

void PollingServer::Dispatch(std::unique_ptr<Connection> c) {
  c->state = Connection::State::kAnswering;
  absl::MutexLock lock(&mu_);
  ready_.push_back(std::move(c));
}

void PollingServer::Settle(std::unique_ptr<Connection> c,
                           std::vector<std::unique_ptr<Connection>>& waiting) {
  using State = Connection::State;
  const absl::Time now = absl::Now();
  if (c->failed) return;
  if (!c->out.empty()) {
    c->Enter(State::kWriting, now, limits_.write_timeout);
  } else if (c->close_after) {
    // Answered for the last time: end our side and let the client finish.
    shutdown(c->fd, SHUT_WR);
    c->in.clear();
    c->Enter(State::kDraining, now, kLingerTimeout);
  } else {
    if (c->framer.Next(c->in, limits_.max_body_bytes).state !=
        Framing::kIncomplete) {
      Dispatch(std::move(c));
      return;
    }
    if (c->in.empty()) {
      c->Enter(State::kIdle, now, limits_.keep_alive_timeout);
    } else {
      c->Enter(State::kReading, now, limits_.request_timeout);
    }
  }
  waiting.push_back(std::move(c));
}

void PollingServer::PollLoop() {
  using State = Connection::State;
  std::vector<std::unique_ptr<Connection>> waiting;
  std::vector<pollfd> fds;
  std::vector<int> accepted;
  std::vector<std::unique_ptr<Connection>> answered;
  char scratch[kRecvChunk];
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      accepted.swap(accepted_);
      answered.swap(answered_);
    }
    absl::Time now = absl::Now();
    for (int fd : accepted) {
      open_connections_.fetch_add(1);
      auto c = std::make_unique<Connection>(fd, &open_connections_);
      c->Enter(State::kIdle, now, limits_.keep_alive_timeout);
      if (open_connections_.load() > limits_.max_connections) {
        // Full: the waiting connection that has waited longest makes room
        // (one that is draining first), so that clients which hold
        // connections open cannot keep a new one out.
        auto oldest = waiting.end();
        absl::Time oldest_since = absl::InfiniteFuture();
        for (auto it = waiting.begin(); it != waiting.end(); ++it) {
          const State s = (*it)->state;
          if (s == State::kWriting) continue;
          const absl::Time since =
              s == State::kDraining ? absl::InfinitePast() : (*it)->since;
          if (since < oldest_since) {
            oldest = it;
            oldest_since = since;
          }
        }
        if (oldest == waiting.end()) {
          spdlog::debug("HTTP: {} connections, refusing one",
                        open_connections_.load());
          continue;  // c closes.
        }
        spdlog::debug("HTTP: {} connections, closing one that waited {}",
                      open_connections_.load(),
                      absl::FormatDuration(now - (*oldest)->since));
        waiting.erase(oldest);
      }
      waiting.push_back(std::move(c));
    }
    accepted.clear();
    for (auto& c : answered) Settle(std::move(c), waiting);
    answered.clear();

    fds.clear();
    fds.push_back({.fd = wake_fd_, .events = POLLIN, .revents = 0});
    absl::Time next = absl::InfiniteFuture();
    for (const auto& c : waiting) {
      const short events = c->state == State::kWriting ? POLLOUT : POLLIN;
      fds.push_back({.fd = c->fd, .events = events, .revents = 0});
      next = std::min(next, c->deadline);
    }
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(
                                  next - now, absl::Milliseconds(1))),
                              0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      spdlog::error("HTTP: poll: {}", std::strerror(errno));
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    if (fds[0].revents != 0) {
      uint64_t count;
      if (read(wake_fd_, &count, sizeof(count)) < 0) {
        // EAGAIN: woken already drained.
      }
    }

    now = absl::Now();
    std::vector<std::unique_ptr<Connection>> ready;
    for (size_t i = 0; i < waiting.size(); ++i) {
      std::unique_ptr<Connection>& c = waiting[i];
      const short revents = fds[i + 1].revents;
      bool done = false;  // The connection is closed.
      if (revents != 0) {
        switch (c->state) {
          case State::kIdle:
          case State::kReading: {
            const ssize_t n = recv(c->fd, scratch, sizeof(scratch), 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
              done = true;
              break;
            }
            if (n < 0) break;
            c->in.append(scratch, static_cast<size_t>(n));
            if (c->state == State::kIdle) {
              c->Enter(State::kReading, now, limits_.request_timeout);
            }
            if (c->framer.Next(c->in, limits_.max_body_bytes).state !=
                Framing::kIncomplete) {
              ready.push_back(std::move(c));
            }
            break;
          }
          case State::kWriting: {
            if (!c->Flush()) {
              done = true;
            } else if (c->out.empty()) {
              answered.push_back(std::move(c));  // Settled below.
            }
            break;
          }
          case State::kDraining: {
            const ssize_t n = recv(c->fd, scratch, sizeof(scratch), 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
              done = true;
            }
            break;
          }
          case State::kAnswering:
            break;
        }
      }
      if (c != nullptr && !done && now >= c->deadline) {
        // Idle past keep_alive_timeout, a request not whole within
        // request_timeout, a response not taken, or a client that did not
        // finish: close without an answer.
        if (c->state == State::kReading) {
          spdlog::debug("HTTP: closing a connection whose request took over {}",
                        absl::FormatDuration(limits_.request_timeout));
        }
        done = true;
      }
      if (done) c.reset();
    }
    std::erase(waiting, nullptr);
    for (auto& c : answered) Settle(std::move(c), waiting);
    answered.clear();
    for (auto& c : ready) Dispatch(std::move(c));
  }
}

void PollingServer::WorkLoop() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &PollingServer::WorkOrStop));
      if (stopping_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    Answer(*c);
    {
      absl::MutexLock lock(&mu_);
      answered_.push_back(std::move(c));
    }
    Wake();
  }
}

bool PollingServer::WorkOrStop() const { return stopping_ || !ready_.empty(); }

void PollingServer::Answer(Connection& c) {
  size_t pos = 0;
  while (!c.close_after && c.out.empty()) {
    const absl::string_view rest = absl::string_view(c.in).substr(pos);
    const Framing f = c.framer.Next(rest, limits_.max_body_bytes);
    if (f.state == Framing::kIncomplete) break;
    c.framer.Reset();
    RequestStream stream(rest.substr(0, f.end), c.fd, &c.out);
    const bool last = ++c.requests >= limits_.max_requests_per_connection;
    bool connection_closed = false;
    const bool ok = process_request(stream, last, connection_closed, nullptr);
    // The next request starts where the framing says, whatever httplib read
    // (a GET's body, the head of a request it refused early); if it wanted
    // more than that, the two disagree on where requests end and the
    // connection cannot go on.
    pos += f.end;
    c.close_after =
        !ok || last || connection_closed || f.close_after || stream.ran_out();
    // Sent now rather than after a round through the poll thread; what the
    // client does not take at once waits there (and so do the requests
    // after it: a client that pipelines must read too).
    if (!c.Flush()) {
      c.failed = true;
      break;
    }
  }
  c.in.erase(0, pos);
}

}  // namespace bubblewatch
