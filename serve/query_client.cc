#include "serve/query_client.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "httplib.h"
#include "serve/query_report.h"

namespace bubblewatch {

absl::StatusOr<std::unique_ptr<QueryClient>> QueryClient::Create(
    absl::string_view url, std::string token) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == absl::string_view::npos ||
      !(absl::StartsWith(url, "http://") ||
        absl::StartsWith(url, "https://"))) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad server URL \"", url, "\": want http://HOST:PORT"));
  }
  const size_t path_start = url.find('/', scheme_end + 3);
  const std::string origin(url.substr(0, path_start));
  std::string prefix(
      path_start == absl::string_view::npos ? "" : url.substr(path_start));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (origin.size() <= scheme_end + 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad server URL \"", url, "\": no host"));
  }
  auto client = std::make_unique<httplib::Client>(origin);
  if (!client->is_valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad server URL \"", url, "\""));
  }
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(60, 0);
  if (!token.empty()) client->set_bearer_token_auth(token);
  return std::unique_ptr<QueryClient>(
      new QueryClient(std::move(client), std::move(prefix), std::string(url)));
}

QueryClient::QueryClient(std::unique_ptr<httplib::Client> client,
                         std::string prefix, std::string url)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      url_(std::move(url)) {}

QueryClient::~QueryClient() = default;

absl::StatusOr<std::string> QueryClient::Get(
    absl::string_view path,
    const std::multimap<std::string, std::string>& params) const {
  httplib::Params query(params.begin(), params.end());
  httplib::Result r =
      client_->Get(absl::StrCat(prefix_, path), query, httplib::Headers{});
  if (!r) {
    return absl::UnavailableError(absl::StrCat("no reply from ", url_, ": ",
                                               httplib::to_string(r.error())));
  }
  if (r->status == 200) return std::move(r->body);
  absl::Status error = ParseErrorJson(r->body);
  if (error.code() == absl::StatusCode::kUnknown) {
    return absl::UnavailableError(absl::StrCat(
        url_, " answered HTTP ", r->status, " without a bubblewatch error"));
  }
  return error;
}

std::string EncodePathSegment(absl::string_view segment) {
  std::string out;
  for (unsigned char c : segment) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

}  // namespace bubblewatch
