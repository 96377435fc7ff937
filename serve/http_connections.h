// PollingServer: cpp-httplib's Server (routing, parsing, responses) with the
// connection handling replaced, for HttpServer (docs/http.md).
//
// Debian's cpp-httplib 0.11 gives each connection a pool thread from accept
// to close: a client that is idle or sends its request slowly holds a thread
// all that time, and 8 of them (the pool) locked every other client out. Its
// per-read timeout never ends a request that trickles in a byte at a time; a
// fresh read buffer per request drops pipelined requests; Nagle is on; the
// listen backlog is 5 and the listening socket takes SO_REUSEPORT, so a second
// server on the same port shares it instead of failing.
//
// Here one poll thread holds every connection that is waiting: for its next
// request (at most keep_alive_timeout), for the rest of a request (all of it
// within request_timeout of its first byte), for a slow reader to take a
// response, or for a closing client to finish. Worker threads see only
// requests that have arrived whole, answer them with httplib's
// process_request from memory, and hand the connection back; pipelined
// requests are answered in order. So waiting clients cost a descriptor and a
// buffer, never a worker, and max_connections bounds those: beyond it the
// connection that has waited longest for a request is closed.
#ifndef BUBBLEWATCH_SERVE_HTTP_CONNECTIONS_H_
#define BUBBLEWATCH_SERVE_HTTP_CONNECTIONS_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "httplib.h"

namespace bubblewatch {

struct ConnectionLimits {
  // A request's head and body must arrive within this of its first byte.
  absl::Duration request_timeout = absl::Seconds(10);
  // A connection with no request under way is closed after this.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  // A response must be taken by the client within this.
  absl::Duration write_timeout = absl::Seconds(10);
  int max_connections = 512;
  // Requests per connection; the last one is answered "Connection: close".
  int max_requests_per_connection = 100;
  // Bodies longer than this are refused (httplib answers 413) without being
  // waited for.
  size_t max_body_bytes = 4096;
  // Threads answering requests.
  int workers = 8;
};

class PollingServer : public httplib::Server {
 public:
  explicit PollingServer(const ConnectionLimits& limits);
  ~PollingServer() override;

  // Binds host:port (0: a free port) and listens. Unlike httplib's own
  // bind_to_port, fails with kUnavailable when another socket listens there
  // (no SO_REUSEPORT). Returns the port.
  absl::StatusOr<int> Bind(const std::string& host, int port);

  // Accepts and answers until stop(); false if accepting failed. Starts the
  // poll and worker threads and stops them (closing every connection) before
  // returning.
  bool Listen();

 private:
  struct Connection;

  // Called by httplib's accept loop with each accepted socket (on the accept
  // thread: see the task queue in the constructor).
  bool process_and_close_socket(socket_t sock) override;

  void PollLoop();
  void WorkLoop();
  bool WorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopThreads();
  // Answers the requests that have arrived whole on `c`, in order.
  void Answer(Connection& c);
  // What follows an answer or a sent response: write, close, wait or answer.
  void Settle(std::unique_ptr<Connection> c,
              std::vector<std::unique_ptr<Connection>>& waiting);
  void Dispatch(std::unique_ptr<Connection> c);
  void Wake();

  const ConnectionLimits limits_;
  // Wakes the poll thread: new, answered connections or stopping.
  int wake_fd_ = -1;
  std::atomic<int> open_connections_{0};
  std::thread poller_;
  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> accepted_ ABSL_GUARDED_BY(mu_);
  // Connections with a whole request, for the workers.
  std::deque<std::unique_ptr<Connection>> ready_ ABSL_GUARDED_BY(mu_);
  // Connections the workers have answered, for the poll thread.
  std::vector<std::unique_ptr<Connection>> answered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_HTTP_CONNECTIONS_H_
