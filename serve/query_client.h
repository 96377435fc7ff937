// QueryClient: fetches the JSON of the HTTP API (serve/http_server.h) for
// `bubblewatch query --server URL`.
#ifndef BUBBLEWATCH_SERVE_QUERY_CLIENT_H_
#define BUBBLEWATCH_SERVE_QUERY_CLIENT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Client;
}

namespace bubblewatch {

class QueryClient {
 public:
  // `url` is "http://HOST:PORT" or "https://HOST:PORT", optionally with a
  // path prefix ("http://proxy/bubblewatch"). `token`, if not empty, is sent
  // as a bearer token. Errors: kInvalidArgument for a malformed URL.
  static absl::StatusOr<std::unique_ptr<QueryClient>> Create(
      absl::string_view url, std::string token);
  ~QueryClient();

  // GETs `path` (e.g. "/api/v1/fleet") with `params` (URL-encoded here) and
  // returns the body of a 200 reply. Other replies become the status the
  // server's JSON error names (kNotFound for 404, kInvalidArgument for 400,
  // kUnauthenticated for 401, ...); no reply is kUnavailable.
  absl::StatusOr<std::string> Get(
      absl::string_view path,
      const std::multimap<std::string, std::string>& params) const;

 private:
  QueryClient(std::unique_ptr<httplib::Client> client, std::string prefix,
              std::string url);
  std::unique_ptr<httplib::Client> client_;
  std::string prefix_;  // Path prefix without a trailing '/'.
  std::string url_;     // For messages.
};

// Percent-encodes `segment` for use as one path segment (everything but
// RFC 3986 unreserved characters).
std::string EncodePathSegment(absl::string_view segment);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_QUERY_CLIENT_H_
