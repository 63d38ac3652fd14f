// A rendezvous store over TCP, as a Gloo store (gloo::rendezvous::Store: Debian 12's
// Gloo has file and Redis stores, no TCP one). Rank 0 serves it from a thread at
// MASTER_ADDR:MASTER_PORT; every rank, rank 0 too, is a client with one connection.
//
// The server also watches the ranks: a rank says who it is when it connects and
// goodbye when it is done, so a connection that closes before its goodbye is a rank
// that stopped (killed, or crashed). The server records that under the rank's failure
// key (rankKey("failed", rank)), which every other rank reads to name it.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tlc {

class TcpStoreServer;

class TcpStore : public gloo::rendezvous::Store {
public:
  // Rank 0 serves the store at `host`:`port` (every interface unless `host` is a
  // loopback address); every rank connects, retrying until `timeout` while the server
  // starts. Throws tlc::Error when the port is taken or no server answers in time.
  TcpStore(const std::string &host, int port, int rank, int worldSize, std::chrono::milliseconds timeout);
  ~TcpStore() override;

  void set(const std::string &key, const std::vector<char> &data) override;
  std::vector<char> get(const std::string &key) override;  // waits for the key
  void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }
  // Waits for every key; throws gloo::IoException naming a rank that stopped meanwhile
  // or the keys still missing when `timeout` runs out.
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override;

  std::optional<std::vector<char>> peek(const std::string &key);
  // Says goodbye. The server's rank then waits, up to the timeout, for every other rank
  // to be gone (goodbye or closed) before it stops serving.
  void leave();

private:
  // One request and its reply over the connection (the mutex held).
  std::optional<std::vector<char>> request(char kind, const std::string &key, const std::vector<char> &value = {});

  std::unique_ptr<TcpStoreServer> server_;  // rank 0
  int socket_ = -1;
  int rank_, worldSize_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
};

} // namespace tlc
