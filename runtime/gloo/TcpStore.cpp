#include "runtime/gloo/TcpStore.h"

#include "runtime/Distributed.h"
#include "runtime/Error.h"

#include <gloo/common/error.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <map>
#include <set>
#include <thread>

namespace tlc {
namespace {

// A message: its kind, then the key and the value, each as a 32-bit length and bytes.
// Requests: Hello (key: the rank), Set, Peek, Bye. Replies: Ok, or Found/Missing with
// the value.
enum Kind : char { Hello = 'H', Set = 'S', Peek = 'P', Bye = 'B', Ok = 'k', Found = 'y', Missing = 'n' };
constexpr uint32_t kMaxKey = 4096, kMaxValue = 64u << 20;

std::string systemError(const char *what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

void appendField(std::string &message, const char *data, size_t size) {
  uint32_t length = uint32_t(size);
  message.append(reinterpret_cast<const char *>(&length), 4);
  message.append(data, size);
}

std::string encode(char kind, const std::string &key, const std::vector<char> &value) {
  std::string message(1, kind);
  appendField(message, key.data(), key.size());
  appendField(message, value.data(), value.size());
  return message;
}

// A whole message at the front of `buffer`: removed and returned, or nullopt while it is
// incomplete. Throws on lengths no message of ours has.
struct Message {
  char kind;
  std::string key;
  std::vector<char> value;
};
std::optional<Message> decode(std::string &buffer) {
  size_t at = 1;
  std::string fields[2];
  for (int f = 0; f < 2; ++f) {
    if (buffer.size() < at + 4) return std::nullopt;
    uint32_t length;
    std::memcpy(&length, buffer.data() + at, 4);
    if (length > (f == 0 ? kMaxKey : kMaxValue)) throw Error(fmt::format("a store message field of {} bytes", length));
    if (buffer.size() < at + 4 + length) return std::nullopt;
    fields[f] = buffer.substr(at + 4, length);
    at += 4 + length;
  }
  Message message{buffer[0], fields[0], std::vector<char>(fields[1].begin(), fields[1].end())};
  buffer.erase(0, at);
  return message;
}

void sendAll(int socket, const std::string &bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    ssize_t n = ::send(socket, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(systemError("sending to the rendezvous store"));
    sent += size_t(n);
  }
}

bool isLoopback(const std::string &host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

} // namespace

// ---- The server ---------------------------------------------------------------------

class TcpStoreServer {
public:
  TcpStoreServer(const std::string &host, int port, int worldSize) : worldSize_(worldSize) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener_ < 0) throw Error(systemError("the rendezvous store's socket"));
    int on = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(isLoopback(host) ? INADDR_LOOPBACK : INADDR_ANY);
    if (::bind(listener_, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0 || ::listen(listener_, 128) != 0) {
      std::string why = std::strerror(errno);
      ::close(listener_);
      throw Error(fmt::format("rank 0 cannot serve the rendezvous store on port {}: {} (set MASTER_PORT to a free "
                              "port)",
                              port, why));
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error(systemError("the rendezvous store's wake-up pipe"));
    thread_ = std::thread([this] { serve(); });
  }

  ~TcpStoreServer() {
    char byte = 0;
    if (::write(wake_[1], &byte, 1) < 0) {  // the thread then sees the pipe ready and ends
    }
    thread_.join();
    for (Connection &connection : connections_) ::close(connection.socket);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  // Until every rank but `self` has said goodbye or gone, or `timeout`.
  void awaitDepartures(int self, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    departedChanged_.wait_for(lock, timeout, [&] {
      for (int rank = 0; rank < worldSize_; ++rank)
        if (rank != self && !departed_.count(rank)) return false;
      return true;
    });
  }

private:
  struct Connection {
    int socket;
    std::string in;
    int rank = -1;      // said in its hello
    bool left = false;  // said goodbye
  };

  void serve() {
    while (true) {
      std::vector<pollfd> polled = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
      for (const Connection &connection : connections_) polled.push_back({connection.socket, POLLIN, 0});
      if (::poll(polled.data(), polled.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (polled[0].revents) return;
      // The connections polled, backwards, so a closed one can be erased in place; then a new one.
      for (size_t i = polled.size() - 2; i-- > 0;)
        if (polled[i + 2].revents && !receive(connections_[i])) {
          closed(connections_[i]);
          ::close(connections_[i].socket);
          connections_.erase(connections_.begin() + ptrdiff_t(i));
        }
      if (polled[1].revents & POLLIN) {
        int socket = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (socket >= 0) {
          int on = 1;
          ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
          connections_.push_back({socket, "", -1, false});
        }
      }
    }
  }

  // Reads what arrived and answers each whole request; false once the connection is
  // closed or broken (or sends what no client of ours sends).
  bool receive(Connection &connection) {
    char chunk[65536];
    ssize_t n = ::recv(connection.socket, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    connection.in.append(chunk, size_t(n));
    try {
      while (std::optional<Message> message = decode(connection.in)) answer(connection, *message);
    } catch (const Error &) {
      return false;
    }
    return true;
  }

  void answer(Connection &connection, const Message &message) {
    std::lock_guard<std::mutex> lock(mutex_);
    switch (message.kind) {
    case Hello: connection.rank = helloRank(message.key); break;
    case Set: values_[message.key] = message.value; break;
    case Bye:
      connection.left = true;
      depart(connection.rank);
      break;
    case Peek: {
      auto found = values_.find(message.key);
      sendAll(connection.socket, encode(found == values_.end() ? Missing : Found, "",
                                        found == values_.end() ? std::vector<char>() : found->second));
      return;
    }
    default: throw Error("an unknown store request");
    }
    sendAll(connection.socket, std::string(1, Ok));
  }

  // The rank a hello names: a whole number below the world size. Anything else is no
  // client of ours (the connection is dropped), never taken for a rank whose closing would
  // then read as that rank's failure.
  int helloRank(const std::string &key) const {
    int rank = -1;
    const char *end = key.data() + key.size();
    auto [stop, error] = std::from_chars(key.data(), end, rank);
    if (error != std::errc() || stop != end || rank < 0 || rank >= worldSize_)
      throw Error(fmt::format("a store hello from no rank of {}", worldSize_));
    return rank;
  }

  // A connection gone: a rank that had not said goodbye stopped, which the others read.
  void closed(const Connection &connection) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (connection.rank < 0 || connection.left) return;
    std::string key = rankKey("failed", connection.rank);
    if (!values_.count(key)) {
      std::string why = "stopped: its connection to the rendezvous store closed before it finished (killed, or crashed)";
      values_[key] = std::vector<char>(why.begin(), why.end());
    }
    depart(connection.rank);
  }

  void depart(int rank) {
    departed_.insert(rank);
    departedChanged_.notify_all();
  }

  int listener_ = -1, wake_[2] = {-1, -1};
  int worldSize_;
  std::vector<Connection> connections_;  // the server thread's alone
  std::mutex mutex_;                     // values_ and departed_, which awaitDepartures reads
  std::map<std::string, std::vector<char>> values_;
  std::set<int> departed_;
  std::condition_variable departedChanged_;
  std::thread thread_;
};

// ---- The client ---------------------------------------------------------------------

namespace {

// A connection to host:port, retried until `timeout` (rank 0 may not serve yet).
int connectTo(const std::string &host, int port, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string why;
  while (true) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (status != 0) {
      why = ::gai_strerror(status);
    } else {
      for (addrinfo *address = found; address; address = address->ai_next) {
        int socket = ::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
        if (socket < 0) continue;
        if (::connect(socket, address->ai_addr, address->ai_addrlen) == 0) {
          ::freeaddrinfo(found);
          int on = 1;
          ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
          return socket;
        }
        why = std::strerror(errno);
        ::close(socket);
      }
      ::freeaddrinfo(found);
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(fmt::format("no rendezvous store answers at {}:{} within {} s ({}): is rank 0 running, and do "
                              "MASTER_ADDR and MASTER_PORT name its machine and a free port?",
                              host, port, std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), why));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

} // namespace

TcpStore::TcpStore(const std::string &host, int port, int rank, int worldSize, std::chrono::milliseconds timeout)
    : rank_(rank), worldSize_(worldSize), timeout_(timeout) {
  if (rank == 0) server_ = std::make_unique<TcpStoreServer>(host, port, worldSize);
  socket_ = connectTo(rank == 0 ? (isLoopback(host) ? host : std::string("127.0.0.1")) : host, port, timeout);
  // A reply slower than the timeout is a server that is gone.
  timeval limit{long(timeout.count() / 1000), long(timeout.count() % 1000) * 1000};
  ::setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  ::setsockopt(socket_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  request(Hello, std::to_string(rank));
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
  server_.reset();
}

std::optional<std::vector<char>> TcpStore::request(char kind, const std::string &key, const std::vector<char> &value) {
  std::lock_guard<std::mutex> lock(mutex_);
  sendAll(socket_, encode(kind, key, value));
  // A peek's reply is a message (Found or Missing, with the value); any other's one byte.
  std::string reply;
  std::optional<Message> message;
  while (kind == Peek ? !message : reply.empty()) {
    char chunk[65536];
    ssize_t n = ::recv(socket_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(n == 0 ? std::string("the rendezvous store closed the connection (rank 0, which serves it, stopped)")
                         : systemError("the rendezvous store does not answer"));
    reply.append(chunk, size_t(n));
    if (kind == Peek) message = decode(reply);
  }
  if (kind != Peek) {
    if (reply[0] != Ok) throw Error("the rendezvous store answered what no request asks");
    return std::nullopt;
  }
  if (message->kind == Found) return message->value;
  return std::nullopt;
}

void TcpStore::set(const std::string &key, const std::vector<char> &data) { request(Set, key, data); }

std::optional<std::vector<char>> TcpStore::peek(const std::string &key) { return request(Peek, key); }

std::vector<char> TcpStore::get(const std::string &key) {
  wait({key}, timeout_);
  return *peek(key);
}

void TcpStore::wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now();
  std::chrono::milliseconds pause(1);
  for (size_t next = 0; next < keys.size();) {
    if (peek(keys[next])) {
      ++next;
      continue;
    }
    for (int rank = 0; rank < worldSize_; ++rank)
      if (std::optional<std::vector<char>> why = rank == rank_ ? std::nullopt : peek(rankKey("failed", rank)))
        throw gloo::IoException(fmt::format("waiting for '{}': rank {} {}", keys[next], rank,
                                            std::string(why->begin(), why->end())));
    if (Clock::now() - start > timeout)
      throw gloo::IoException(fmt::format("waiting for '{}': no rank set it within {} s", keys[next],
                                          std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void TcpStore::leave() {
  request(Bye, std::to_string(rank_));
  if (server_) server_->awaitDepartures(rank_, timeout_);
}

} // namespace tlc
