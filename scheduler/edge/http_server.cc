#include "scheduler/edge/http_server.h"

#include <openssl/ssl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_gate.h"
#include "common/mutex.h"
#include "glog/logging.h"
#include "httplib.h"
#include "prometheus/gauge.h"
#include "scheduler/edge/http_tls.h"
#include "scheduler/edge/openai_json.h"
#include "scheduler/edge/generate_request.h"

namespace weft {
namespace {

using openai::Api;

// ---------------------------------------------------------------------------------------
// The Outbox's writer (its WriteTarget) for an HTTP call. The outbox calls it from any
// thread (usually the planning thread) and holds it until the call is done; it only records what happened and wakes the connection's thread
// through an eventfd. That thread, in Next(), waits on the eventfd and on the client's
// socket at once, so it learns of a response, the call's end or the client leaving,
// whichever comes first, without polling on a timer.
class CallChannel final : public WriteTarget<weft::v1::GenerateResponse> {
 public:
  struct Event {
    enum Kind { kResponse, kFinished, kClientGone } kind = kClientGone;
    const weft::v1::GenerateResponse* response = nullptr;  // kResponse: valid until WriteDone
    absl::Status status;                                   // kFinished
  };

  explicit CallChannel(int socket)
      : socket_(socket), efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~CallChannel() override {
    if (efd_ >= 0) close(efd_);
  }
  bool ok() const { return efd_ >= 0; }

  void WriteMessage(const weft::v1::GenerateResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    pending_ = response;
    Wake();
  }
  void FinishCall(const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    finished_ = true;
    status_ = status;
    Wake();
  }
  // The slow-reader guard: a write stuck behind a client that does not read fails at
  // once when the socket is shut down.
  void CancelCall(const absl::Status&) override ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (socket_ >= 0) ::shutdown(socket_, SHUT_RDWR);
  }

  // Connection thread: the call no longer owns the socket (it may be closed and reused).
  void DetachSocket() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    socket_ = -1;
  }

  // Connection thread: waits for the next thing that happened.
  Event Next() ABSL_LOCKS_EXCLUDED(mu_) {
    for (;;) {
      int socket = -1;
      {
        MutexLock lock(&mu_);
        if (pending_ != nullptr) {
          Event e;
          e.kind = Event::kResponse;
          e.response = pending_;
          pending_ = nullptr;
          return e;
        }
        if (finished_) {
          Event e;
          e.kind = Event::kFinished;
          e.status = status_;
          return e;
        }
        socket = socket_;
      }
      pollfd fds[2] = {{efd_, POLLIN, 0}, {socket, POLLRDHUP, 0}};
      const int n = ::poll(fds, socket >= 0 ? 2 : 1, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        PLOG(WARNING) << "poll";
        return Event();  // treated as the client leaving: the request is cancelled
      }
      if (fds[0].revents & POLLIN) {
        uint64_t count;
        (void)!read(efd_, &count, sizeof count);
        continue;  // look at the state first
      }
      if (socket >= 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
        return Event();
      }
    }
  }

 private:
  void Wake() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t one = 1;
    (void)!write(efd_, &one, sizeof one);
  }

  Mutex mu_;
  // Written under mu_ by the connection thread only; read by it without the lock.
  int socket_;
  const int efd_;
  const weft::v1::GenerateResponse* pending_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// One generation call, on its connection's thread (and in the stream's content
// provider, which runs on the same thread). Owns the frontend call (its stream slot);
// Close() — at the latest from the destructor — ends it: a call that did not end by
// itself is cancelled in the engine.
class HttpGeneration {
 public:
  HttpGeneration(std::unique_ptr<GenerateFrontend::Call> call, std::shared_ptr<CallChannel> channel,
                 openai::ParsedRequest parsed, openai::ResponseOptions response_options)
      : call_(std::move(call)),
        channel_(std::move(channel)),
        parsed_(std::move(parsed)),
        builder_(std::move(response_options)) {}
  ~HttpGeneration() { Close(); }

  const openai::ParsedRequest& parsed() const { return parsed_; }

  // Non-streaming: the whole answer, or the error.
  void Reply(httplib::Response& res) {
    for (;;) {
      CallChannel::Event e = channel_->Next();
      if (e.kind == CallChannel::Event::kResponse) {
        builder_.Add(*e.response);
        WriteDone(true);
        continue;
      }
      if (e.kind == CallChannel::Event::kClientGone) {
        Close();
        res.status = 499;  // nobody reads it; logged as "client closed request"
        return;
      }
      ended_ = true;
      if (e.status.ok()) {
        res.status = 200;
        res.set_content(builder_.Body(), "application/json");
      } else {
        SetError(res, openai::ErrorFor(e.status, &parsed_));
      }
      Close();
      return;
    }
  }

  // Streaming: waits for the first response (or the end) to choose the status, then
  // leaves the rest to the content provider (StreamStep).
  // Returns false when the answer is already complete in `res` (an error, or the client left).
  bool BeginStream(httplib::Response& res) {
    CallChannel::Event e = channel_->Next();
    switch (e.kind) {
      case CallChannel::Event::kClientGone:
        Close();
        res.status = 499;
        return false;
      case CallChannel::Event::kFinished:
        ended_ = true;
        if (!e.status.ok()) {
          SetError(res, openai::ErrorFor(e.status, &parsed_));
          Close();
          return false;
        }
        held_ = "data: [DONE]\n\n";  // ended OK without a response (no tokens to show)
        done_after_held_ = true;
        return true;
      case CallChannel::Event::kResponse:
        held_ = Frame(builder_.StreamEvents(*e.response));
        holding_write_ = true;
        return true;
    }
    return false;
  }

  // One step of the content provider: writes what is held, or waits for the next event.
  // Returns false to drop the connection (the client left).
  bool StreamStep(httplib::DataSink& sink) {
    if (!held_.empty() || holding_write_) {
      if (done_after_held_) Close();  // the slots go back before the client sees the end
      const bool ok = held_.empty() || sink.write(held_.data(), held_.size());
      held_.clear();
      if (holding_write_) {
        holding_write_ = false;
        WriteDone(ok);
      }
      if (!ok) return Close(), false;
      if (done_after_held_) sink.done();
      return true;
    }
    CallChannel::Event e = channel_->Next();
    switch (e.kind) {
      case CallChannel::Event::kResponse: {
        const std::string frame = Frame(builder_.StreamEvents(*e.response));
        const bool ok = frame.empty() || sink.write(frame.data(), frame.size());
        WriteDone(ok);
        if (!ok) return Close(), false;
        return true;
      }
      case CallChannel::Event::kFinished: {
        ended_ = true;
        std::string tail;
        if (!e.status.ok()) {
          // After the first token the status is sent: the error travels in-band.
          tail = absl::StrCat("data: ", openai::ErrorBody(openai::ErrorFor(e.status, &parsed_)),
                              "\n\n");
        }
        tail += "data: [DONE]\n\n";
        Close();  // the slots go back before the client sees the end
        sink.write(tail.data(), tail.size());
        sink.done();
        return true;
      }
      case CallChannel::Event::kClientGone:
        break;
    }
    Close();
    return false;
  }

  // Ends the call for the client: cancels it in the engine unless it ended by itself,
  // releases the outbox and gives the stream slot back. Idempotent.
  void Close() {
    if (call_ == nullptr) return;
    const std::shared_ptr<Outbox> outbox = call_->outbox();
    if (!ended_) {
      call_->Cancel();
      outbox->Finish(absl::CancelledError("the client closed the connection"));
    }
    channel_->DetachSocket();
    outbox->OnCallDone();
    call_.reset();
  }

  static void SetError(httplib::Response& res, const openai::ApiError& error) {
    res.status = error.http_status;
    res.set_content(openai::ErrorBody(error), "application/json");
  }

 private:
  static std::string Frame(const std::vector<std::string>& events) {
    std::string out;
    for (const std::string& e : events) absl::StrAppend(&out, "data: ", e, "\n\n");
    return out;
  }
  void WriteDone(bool ok) {
    if (call_ != nullptr) call_->outbox()->OnWriteDone(ok);
  }

  std::unique_ptr<GenerateFrontend::Call> call_;
  const std::shared_ptr<CallChannel> channel_;
  const openai::ParsedRequest parsed_;
  openai::ResponseBuilder builder_;
  bool ended_ = false;            // the engine ended the call (Finish reached us)
  std::string held_;              // stream bytes waiting for the content provider
  bool holding_write_ = false;    // held_ is a response the outbox waits for (OnWriteDone)
  bool done_after_held_ = false;  // held_ is the end of the stream
};

int64_t UnixSeconds(absl::Time t) { return absl::ToUnixSeconds(t); }

}  // namespace

// ---------------------------------------------------------------------------------------

absl::Status HttpServerOptions::Validate() const {
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError("http port must be in [0, 65535]");
  if (max_connections < 1) return absl::InvalidArgumentError("max_connections must be >= 1");
  if (max_body_bytes < 1024) return absl::InvalidArgumentError("max_body_bytes must be >= 1024");
  if (max_header_bytes < 1024 || max_header_fields < 1) {
    return absl::InvalidArgumentError("max_header_bytes must be >= 1024, max_header_fields >= 1");
  }
  if (keep_alive_timeout < absl::Seconds(1) || read_timeout < absl::Seconds(1) ||
      write_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError("HTTP timeouts must be >= 1 s");
  }
  if (tls.enabled() && (tls.cert.empty() || tls.key.empty())) {
    return absl::InvalidArgumentError(
        "HTTP TLS needs a certificate and its key (a client CA alone cannot turn TLS on)");
  }
  return absl::OkStatus();
}

class OpenAiHttpServer::Impl {
 public:
  Impl(HttpServerOptions options, GenerateFrontend* frontend, const TokenTextSource* text,
       ServiceMetrics* metrics)
      : options_(std::move(options)), frontend_(frontend), text_(text), metrics_(metrics) {}

  absl::Status Start();
  void Stop();
  int port() const { return port_; }
  void SetServing(bool serving) { serving_.store(serving); }

 private:
  // The bearer token, before any other work. False: `res` holds the 401 (counted when
  // it refuses a generation call).
  bool Authenticated(const httplib::Request& req, httplib::Response& res, bool generation);
  // The x-weft-model header ("" when absent); INVALID_ARGUMENT when given more than once.
  static absl::StatusOr<std::string> ModelHeader(const httplib::Request& req);
  // The model a GET names (/v1/models/{id}: `field`) agrees with the header and is
  // served. False: `res` holds the error.
  bool ModelServed(absl::string_view field, const httplib::Request& req, httplib::Response& res);
  void Generate(Api api, const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& content);
  void Routes();

  const HttpServerOptions options_;
  GenerateFrontend* const frontend_;
  const TokenTextSource* const text_;
  ServiceMetrics* const metrics_;  // may be null
  const int64_t started_ = UnixSeconds(absl::Now());

  // The connection is closed after this answer (part of the body is left unread).
  static void CloseAfter(httplib::Response& res) {
    res.set_header("Connection", "close");
    GatedHttpServer::CloseAfterResponse();
  }
  HttpGateOptions GateOptions();

  std::unique_ptr<HttpTls> tls_;  // outlives ssl_ctx_ (its callback calls it)
  struct FreeCtx {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
  };
  std::unique_ptr<SSL_CTX, FreeCtx> ssl_ctx_;  // outlives server_
  std::unique_ptr<GatedHttpServer> server_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> serving_{false};
  std::thread listener_;
  bool stopped_ = false;
};

bool OpenAiHttpServer::Impl::Authenticated(const httplib::Request& req, httplib::Response& res,
                                           bool generation) {
  if (!frontend_->auth_required()) return true;
  const size_t given = req.get_header_value_count("Authorization");
  const absl::Status s =
      given > 1 ? absl::UnauthenticatedError("the Authorization header is given more than once")
                : frontend_->Authenticate(req.get_header_value("Authorization"));
  if (s.ok()) return true;
  if (generation) frontend_->CountRejection(s);
  HttpGeneration::SetError(res, openai::ErrorFor(s));
  // RFC 6750: no credentials -> the scheme alone; credentials refused -> invalid_token.
  res.set_header("WWW-Authenticate", given == 0 ? "Bearer" : "Bearer error=\"invalid_token\"");
  return false;
}

absl::StatusOr<std::string> OpenAiHttpServer::Impl::ModelHeader(const httplib::Request& req) {
  const size_t given = req.get_header_value_count(kModelMetadataKey);
  if (given > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", kModelMetadataKey, " header is given ", given, " times"));
  }
  return req.get_header_value(kModelMetadataKey);
}

bool OpenAiHttpServer::Impl::ModelServed(absl::string_view field, const httplib::Request& req,
                                         httplib::Response& res) {
  absl::StatusOr<std::string> header = ModelHeader(req);
  const absl::Status s = header.ok() ? frontend_->CheckModel(field, *header) : header.status();
  if (s.ok()) return true;
  HttpGeneration::SetError(res, openai::ErrorFor(s));
  return false;
}

void OpenAiHttpServer::Impl::Generate(Api api, const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& content) {
  const absl::Time arrival = absl::Now();
  // The call's id (the client's X-Request-Id, else a new one), echoed on every answer.
  const std::string request_id = frontend_->RequestId(req.get_header_value("X-Request-Id"));
  res.set_header("X-Request-Id", request_id);
  // The token before the body is stored or parsed. A refused body is still read (and
  // dropped as it arrives, within the gate's wire cap and deadline): left unread, it
  // would be taken for the connection's next request.
  if (!Authenticated(req, res, /*generation=*/true)) {
    if (!content([](const char*, size_t) { return true; })) CloseAfter(res);
    return;
  }
  // The cap counts the bytes the library hands over: after de-chunking (Content-Encoding
  // other than identity is refused by the gate before any byte is read). Reading stops
  // at the first byte past it.
  std::string body;
  bool too_large = false;
  if (!content([&](const char* data, size_t n) {
        if (n > options_.max_body_bytes - body.size()) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      })) {
    if (too_large) {
      frontend_->CountRejection(absl::ResourceExhaustedError("request body too large"));
      HttpGeneration::SetError(
          res, openai::ErrorForHttp(413, absl::StrCat("the request body is over ",
                                                      options_.max_body_bytes, " bytes")));
    }
    CloseAfter(res);
    return;  // otherwise the gate answered (408, 413, 415) or the client left
  }
  CallContext context;
  context.arrival = arrival;
  context.request_id = request_id;
  context.authorization = req.get_header_value("Authorization");
  if (absl::StatusOr<std::string> header = ModelHeader(req); header.ok()) {
    context.model_header = std::move(*header);
  } else {
    frontend_->CountRejection(header.status(), request_id);
    HttpGeneration::SetError(res, openai::ErrorFor(header.status()));
    return;
  }
  auto parsed = openai::ParseRequest(api, body);
  if (!parsed.ok()) {
    frontend_->CountRejection(parsed.status(), request_id);
    HttpGeneration::SetError(res, openai::ErrorFor(parsed.status()));
    return;
  }
  parsed->request.set_client_request_id(request_id);
  auto call = frontend_->Start(parsed->request, context);
  if (!call.ok()) {
    HttpGeneration::SetError(res, openai::ErrorFor(call.status(), &*parsed));
    return;
  }
  const int socket = GatedHttpServer::CurrentSocket();
  auto channel = std::make_shared<CallChannel>(socket);
  (*call)->outbox()->Attach(channel);
  openai::ResponseOptions ro;
  ro.api = api;
  ro.model = frontend_->model_name();
  ro.created = UnixSeconds(arrival);
  ro.include_usage = parsed->include_usage;
  ro.logprobs = parsed->logprobs;
  ro.parse_tool_calls = parsed->parse_tool_calls && api == openai::Api::kChatCompletions;
  ro.tool_format = frontend_->tool_call_format();
  if (text_ != nullptr) {
    ro.token_bytes = [text = text_](int32_t id) { return std::string(text->TokenBytes(id)); };
  }
  const bool stream = parsed->stream;
  auto gen = std::make_shared<HttpGeneration>(std::move(*call), channel, *std::move(parsed),
                                              std::move(ro));
  if (!channel->ok()) {
    gen->Close();
    HttpGeneration::SetError(res,
                             openai::ErrorFor(absl::InternalError("cannot create an eventfd")));
    return;
  }
  if (!stream) {
    gen->Reply(res);
    return;
  }
  if (!gen->BeginStream(res)) return;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: pass each event on at once
  // The provider runs on this thread after the handler returns; the lambdas hold the
  // call, and the Response (so the call) is gone before the connection's socket closes.
  res.set_chunked_content_provider(
      "text/event-stream", [gen](size_t, httplib::DataSink& sink) { return gen->StreamStep(sink); },
      [gen](bool) { gen->Close(); });
}

void OpenAiHttpServer::Impl::Routes() {
  httplib::Server& svr = *server_;
  svr.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    // No token (probes). An x-weft-model header naming another model is a 404: a
    // proxy's check names its model, and a scheduler serving another one fails it.
    if (!ModelServed("", req, res)) return;
    const bool serving = serving_.load();
    res.status = serving ? 200 : 503;
    res.set_content(serving ? "{\"status\":\"serving\"}" : "{\"status\":\"not_serving\"}",
                    "application/json");
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& content) {
    Generate(Api::kCompletions, req, res, content);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                          const httplib::ContentReader& content) {
    Generate(Api::kChatCompletions, req, res, content);
  });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authenticated(req, res, /*generation=*/false) || !ModelServed("", req, res)) return;
    res.set_content(openai::ModelListBody(frontend_->ModelInfo(), started_), "application/json");
  });
  svr.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authenticated(req, res, /*generation=*/false) ||
        !ModelServed(std::string(req.matches[1]), req, res)) {
      return;
    }
    res.set_content(openai::ModelBody(frontend_->ModelInfo(), started_), "application/json");
  });
  // Statuses >= 400 without a body (no route, body too large, bad request line) get
  // OpenAI's error shape too.
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_length_ > 0 || res.status == 499) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        std::string message = res.status == 404
                                  ? absl::StrCat("Invalid URL (", req.method, " ", req.path, ")")
                              : res.status == 413 ? std::string("the request body is too large")
                                                  : absl::StrCat("HTTP ", res.status);
        HttpGeneration::SetError(res, openai::ErrorForHttp(res.status, std::move(message)));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LOG(ERROR) << "HTTP handler threw: " << what;
        HttpGeneration::SetError(res, openai::ErrorFor(absl::InternalError("internal error")));
      });
  if (metrics_ != nullptr) {
    svr.set_logger([this](const httplib::Request&, const httplib::Response& res) {
      metrics_->HttpResponses(res.status).Increment();
    });
  }
}

HttpGateOptions OpenAiHttpServer::Impl::GateOptions() {
  HttpGateOptions g;
  g.max_connections = options_.max_connections;
  g.max_header_bytes = options_.max_header_bytes;
  g.max_header_fields = options_.max_header_fields;
  // On the wire, chunk framing included; the exact cap (de-chunked) is Generate's.
  g.max_body_wire_bytes = 2 * options_.max_body_bytes + (64 << 10);
  g.request_timeout = options_.read_timeout;
  g.keep_alive_timeout = options_.keep_alive_timeout;
  g.write_timeout = options_.write_timeout;
  g.tls = ssl_ctx_.get();
  // A drain (or before the first replica): every answer says Connection: close, so
  // clients and proxies reconnect (to another scheduler) for their next request.
  g.close_connections = [this] { return !serving_.load(); };
  g.error_body = [](int status, absl::string_view message) {
    return openai::ErrorBody(openai::ErrorForHttp(status, std::string(message)));
  };
  if (metrics_ != nullptr) {
    g.busy = &metrics_->http_connections;
    // The gate's own refusals count with the handlers' answers, by status.
    g.on_refused = [m = metrics_](int status) { m->HttpResponses(status).Increment(); };
  }
  return g;
}

absl::Status OpenAiHttpServer::Impl::Start() {
  if (options_.tls.enabled()) {
    auto tls = HttpTls::Load(options_.tls);
    if (!tls.ok()) return tls.status();
    tls_ = std::move(*tls);
    ssl_ctx_.reset(SSL_CTX_new(TLS_server_method()));
    if (ssl_ctx_ == nullptr || !tls_->Configure(*ssl_ctx_)) {
      return absl::InternalError("HTTP TLS: cannot set up the OpenSSL context");
    }
  }
  server_ = std::make_unique<GatedHttpServer>(GateOptions());
  httplib::Server& svr = *server_;
  svr.set_tcp_nodelay(true);             // events go out as they are written (no Nagle delay)
  svr.set_payload_max_length(options_.max_body_bytes);  // a Content-Length over it: 413
  // The library's default sets SO_REUSEPORT, which would let a second server bind the
  // same port and take half its connections; SO_REUSEADDR only. Keep the socket to
  // widen its backlog below.
  svr.set_socket_options([this](int fd) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    listen_fd_ = fd;
  });
  Routes();
  port_ = options_.port == 0
              ? svr.bind_to_any_port(options_.host)
              : (svr.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind the HTTP port ", options_.host, ":",
                                               options_.port, " (in use?)"));
  }
  // cpp-httplib 0.11.4 listens with a backlog of 5 (compiled in): a burst of clients
  // connecting at once would be refused. Listening again only widens the backlog.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void OpenAiHttpServer::Impl::Stop() {
  if (stopped_ || server_ == nullptr) return;
  stopped_ = true;
  server_->Stop();
  if (listener_.joinable()) listener_.join();
}

absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> OpenAiHttpServer::Start(
    HttpServerOptions options, GenerateFrontend* frontend, const TokenTextSource* text,
    ServiceMetrics* metrics) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(std::move(options), frontend, text, metrics);
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<OpenAiHttpServer>(new OpenAiHttpServer(std::move(impl)));
}

OpenAiHttpServer::OpenAiHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAiHttpServer::~OpenAiHttpServer() { Stop(); }
int OpenAiHttpServer::port() const { return impl_->port(); }
void OpenAiHttpServer::SetServing(bool serving) { impl_->SetServing(serving); }
void OpenAiHttpServer::Stop() { impl_->Stop(); }

}  // namespace weft
