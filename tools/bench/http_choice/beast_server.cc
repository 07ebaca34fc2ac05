// Boost.Beast prototype: same endpoints as httplib_server.cc, asynchronous, N io threads.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <iostream>
#include <thread>
#include "engine_sim.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, EngineSim* e) : stream_(std::move(s)), engine_(e) {}
  void Start() { Read(); }

 private:
  struct Feed : SimStream {
    std::shared_ptr<Session> session;
    bool Push(int i, bool last) override {
      auto s = session;
      if (last) session.reset();
      std::string ev = TokenEvent(i);
      if (last) ev += "data: [DONE]\n\n";
      asio::post(s->stream_.get_executor(), [s, ev = std::move(ev), last]() mutable {
        s->Enqueue(std::move(ev), last);
      });
      return true;
    }
  };
  void Read() {
    req_ = {};
    http::async_read(stream_, buf_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return;
      self->Route();
    });
  }
  void Route() {
    if (req_.target() == "/health") {
      auto res = std::make_shared<http::response<http::string_body>>(http::status::ok, req_.version());
      res->set(http::field::content_type, "text/plain");
      res->body() = "ok";
      res->keep_alive(req_.keep_alive());
      res->prepare_payload();
      http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
        if (ec) return;
        if (res->keep_alive()) self->Read(); else self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      });
      return;
    }
    std::string t(req_.target());
    int tokens = std::atoi(t.substr(t.find("tokens=") + 7).c_str());
    header_ = std::make_shared<http::response<http::empty_body>>(http::status::ok, req_.version());
    header_->set(http::field::content_type, "text/event-stream");
    header_->chunked(true);
    sr_ = std::make_shared<http::response_serializer<http::empty_body>>(*header_);
    writing_ = true;
    http::async_write_header(stream_, *sr_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return;
      self->Pump();
    });
    auto f = std::make_shared<Feed>();
    f->session = shared_from_this();
    f->tokens = tokens;
    engine_->Add(f);
  }
  void Enqueue(std::string ev, bool last) {
    q_.push_back(std::move(ev));
    if (last) last_ = true;
    Pump();
  }
  void Pump() {
    if (writing_ || q_.empty()) return;
    out_.clear();
    while (!q_.empty()) { out_ += q_.front(); q_.pop_front(); }
    writing_ = true;
    const bool fin = last_;
    auto after = [self = shared_from_this(), fin](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return;
      if (fin) { self->Read(); return; }
      self->Pump();
    };
    if (fin) {
      chunks_ = {asio::buffer(out_)};
      asio::async_write(stream_, http::make_chunk(asio::buffer(out_)), [self = shared_from_this(), after](beast::error_code ec, size_t n) {
        if (ec) return;
        asio::async_write(self->stream_, http::make_chunk_last(), after);
      });
    } else {
      asio::async_write(stream_, http::make_chunk(asio::buffer(out_)), after);
    }
  }
  beast::tcp_stream stream_;
  EngineSim* engine_;
  beast::flat_buffer buf_;
  http::request<http::string_body> req_;
  std::shared_ptr<http::response<http::empty_body>> header_;
  std::shared_ptr<http::response_serializer<http::empty_body>> sr_;
  std::deque<std::string> q_;
  std::string out_;
  std::vector<asio::const_buffer> chunks_;
  bool writing_ = false, last_ = false;
};

int main(int argc, char** argv) {
  const int port = std::atoi(argv[1]);
  const int threads = std::atoi(argv[2]);
  EngineSim engine(std::chrono::milliseconds(std::atoi(argv[3])));
  asio::io_context ioc(threads);
  tcp::acceptor acc(ioc, {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  std::function<void()> accept = [&] {
    acc.async_accept(asio::make_strand(ioc), [&](beast::error_code ec, tcp::socket s) {
      if (!ec) std::make_shared<Session>(std::move(s), &engine)->Start();
      accept();
    });
  };
  accept();
  std::vector<std::thread> ts;
  for (int i = 1; i < threads; ++i) ts.emplace_back([&] { ioc.run(); });
  ioc.run();
}
