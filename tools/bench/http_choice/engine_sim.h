// Simulated engine for the HTTP library comparison: one thread "steps" every
// `interval` and pushes one token to every open stream, as a decode step does.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

struct SimStream {
  virtual ~SimStream() = default;
  // Called on the engine thread; must not block. Returns false when the stream is gone.
  virtual bool Push(int token_index, bool last) = 0;
  int tokens = 0;
  int sent = 0;
};

class EngineSim {
 public:
  explicit EngineSim(std::chrono::milliseconds interval) : interval_(interval) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~EngineSim() { stop_ = true; thread_.join(); }
  void Add(std::shared_ptr<SimStream> s) { std::lock_guard<std::mutex> l(mu_); streams_.push_back(std::move(s)); }
 private:
  void Loop() {
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      next += interval_;
      std::this_thread::sleep_until(next);
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = streams_.begin(); it != streams_.end();) {
        SimStream& s = **it;
        const bool last = s.sent + 1 == s.tokens;
        if (!s.Push(s.sent++, last) || last) it = streams_.erase(it); else ++it;
      }
    }
  }
  std::chrono::milliseconds interval_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::list<std::shared_ptr<SimStream>> streams_;
  std::thread thread_;
};

inline std::string TokenEvent(int i) {
  return "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok" +
         std::to_string(i) + "\",\"logprobs\":null,\"finish_reason\":null}]}\n\n";
}
