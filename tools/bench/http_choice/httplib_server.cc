// cpp-httplib prototype: GET /health, POST /stream?tokens=N (SSE, one event per engine step).
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <iostream>
#include "httplib.h"  // Debian libcpp-httplib-dev (0.11.4)
#include "engine_sim.h"

struct HttplibStream : SimStream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> q;
  bool done = false, gone = false;
  bool Push(int i, bool last) override {
    std::lock_guard<std::mutex> l(mu);
    if (gone) return false;
    q.push_back(TokenEvent(i));
    if (last) { q.push_back("data: [DONE]\n\n"); done = true; }
    cv.notify_one();
    return true;
  }
};

int main(int argc, char** argv) {
  const int port = std::atoi(argv[1]);
  const int threads = std::atoi(argv[2]);
  EngineSim engine(std::chrono::milliseconds(std::atoi(argv[3])));
  httplib::Server svr;
  svr.set_tcp_nodelay(true);
  svr.set_keep_alive_max_count(100000);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  svr.Post("/stream", [&](const httplib::Request& req, httplib::Response& res) {
    auto s = std::make_shared<HttplibStream>();
    s->tokens = std::atoi(req.get_param_value("tokens").c_str());
    engine.Add(s);
    res.set_chunked_content_provider("text/event-stream", [s](size_t, httplib::DataSink& sink) {
      std::unique_lock<std::mutex> l(s->mu);
      s->cv.wait(l, [&] { return !s->q.empty(); });
      std::string out;
      while (!s->q.empty()) { out += s->q.front(); s->q.pop_front(); }
      const bool done = s->done && s->q.empty();
      l.unlock();
      if (!sink.write(out.data(), out.size())) { std::lock_guard<std::mutex> g(s->mu); s->gone = true; return false; }
      if (done) sink.done();
      return true;
    });
  });
  int lfd = -1;
  svr.set_socket_options([&lfd](int fd) { int one = 1; setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); lfd = fd; });
  if (!svr.bind_to_port("127.0.0.1", port)) return 1;
  ::listen(lfd, 1024);  // the library's compiled-in backlog is 5
  svr.listen_after_bind();
}
