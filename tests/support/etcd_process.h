#pragma once
// EtcdCluster: real etcd members for tests, one or several on 127.0.0.1,
// started by PID and stopped by PID. Each member gets free ports (bound at
// port 0 to find them; the whole start is tried again when etcd then finds
// one taken), a fresh data directory, its log in a file, and is waited for
// with a bounded poll of its /health. A test may kill a member and start it
// again on the same ports and data. Every member also listens on a plain
// HTTP client URL, which the helper polls and tests may use for setup,
// beside an https one when the options give a certificate.
//
// The binaries: $FENCEGATE_ETCD or /usr/bin/etcd, $FENCEGATE_ETCDCTL or
// /usr/bin/etcdctl (Debian's etcd-server and etcd-client). Members die
// with the test process (PR_SET_PDEATHSIG) if it dies first.

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace fencegate::testing {

namespace etcd_process_detail {

using Clock = std::chrono::steady_clock;

inline std::string Binary(const char* env, const char* fallback) {
  const char* set = std::getenv(env);  // NOLINT(concurrency-mt-unsafe): test set-up
  return set != nullptr && *set != '\0' ? set : fallback;
}

// n distinct free TCP ports on 127.0.0.1: all bound at once, then released.
inline std::vector<uint16_t> FreePorts(size_t n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (fd >= 0) ::close(fd);
      break;
    }
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (const int fd : fds) ::close(fd);
  return ports;
}

// One HTTP/1.0 exchange with 127.0.0.1:port, each socket operation bounded
// by `timeout`. The answer's body, or "" when none came.
// `headers`: more header lines, each ending in "\r\n".
inline std::string HttpExchange(uint16_t port, const std::string& method, const std::string& path,
                                const std::string& body, const std::string& headers = "",
                                std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" +
                                headers + "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (;;) {
        const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
        if (n <= 0) break;
        answer.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  const size_t head_end = answer.find("\r\n\r\n");
  return head_end == std::string::npos ? "" : answer.substr(head_end + 4);
}

// Starts `argv` with stdout and stderr appended to `log`; -1 on failure.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) return -1;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::dup2(out, 1);
    ::dup2(out, 2);
    if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::close(fd);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out);
  return pid;
}

// Waits for `pid` until `deadline`, then kills it. Its exit status, or -1.
inline int Reap(pid_t pid, Clock::time_point deadline) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0) return -1;
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace etcd_process_detail

class EtcdCluster {
 public:
  struct Options {
    size_t members = 1;
    // A PEM certificate and key: each member then serves https too, on
    // endpoint(i) (the plain URL stays, as plain_endpoint(i)).
    std::string cert_file;
    std::string key_file;
    std::chrono::milliseconds start_within{60000};  // every member healthy
  };

  // Starts the members and waits until each says it is healthy (it has a
  // leader). nullptr with *error (the members' logs included) on failure.
  static std::unique_ptr<EtcdCluster> Start(const Options& options, std::string* error) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(options));
      if (cluster->dir_.empty()) {
        *error = "etcd: no temporary directory";
        return nullptr;
      }
      if (cluster->StartAll(error)) return cluster;
      if (error->find("address already in use") == std::string::npos) return nullptr;
    }
    return nullptr;
  }

  ~EtcdCluster() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(i);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  size_t size() const { return members_.size(); }
  // The URL clients use: https when the options give a certificate.
  std::string endpoint(size_t i) const {
    const Member& m = members_[i];
    return tls() ? "https://127.0.0.1:" + std::to_string(m.tls_port) : plain_endpoint(i);
  }
  std::string plain_endpoint(size_t i) const {
    return "http://127.0.0.1:" + std::to_string(members_[i].client_port);
  }
  std::vector<std::string> endpoints() const {
    std::vector<std::string> all;
    for (size_t i = 0; i < members_.size(); ++i) all.push_back(endpoint(i));
    return all;
  }
  pid_t pid(size_t i) const { return members_[i].pid; }
  std::string log(size_t i) const { return etcd_process_detail::ReadFile(members_[i].log); }

  // SIGKILL, then waits for the process. Nothing when it is not running.
  void Kill(size_t i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    ::kill(m.pid, SIGKILL);
    int status = 0;
    ::waitpid(m.pid, &status, 0);
    m.pid = -1;
  }

  // Starts a killed member again (same ports, same data) and waits until it
  // is healthy.
  bool Restart(size_t i, std::string* error) {
    Kill(i);
    members_[i].pid = etcd_process_detail::Spawn(Argv(i), members_[i].log);
    if (members_[i].pid <= 0) {
      *error = "etcd: cannot start " + members_[i].name;
      return false;
    }
    return WaitHealthy(i, etcd_process_detail::Clock::now() + options_.start_within, error);
  }

  // The index of the member that is the leader, by /v3/maintenance/status
  // asked of each running member; -1 when none says it is.
  int Leader() const {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].pid <= 0) continue;
      const std::string status = etcd_process_detail::HttpExchange(
          members_[i].client_port, "POST", "/v3/maintenance/status", "{}");
      const std::string id = Field(status, "member_id");
      if (!id.empty() && id == Field(status, "leader")) return static_cast<int>(i);
    }
    return -1;
  }

  // An HTTP/1.0 POST of `body` to `path` of member i's plain URL, with
  // more header lines ("Name: value\r\n"); the answer's body, "" when none.
  std::string Post(size_t i, const std::string& path, const std::string& body,
                   const std::string& headers = "") const {
    return etcd_process_detail::HttpExchange(members_[i].client_port, "POST", path, body, headers);
  }

  // Runs etcdctl with `args` against member 0's plain URL and waits for it.
  // false + *error (its output) unless it exits 0.
  bool Etcdctl(const std::vector<std::string>& args, std::string* error) const {
    std::vector<std::string> argv = {
        etcd_process_detail::Binary("FENCEGATE_ETCDCTL", "/usr/bin/etcdctl"),
        "--endpoints=" + plain_endpoint(0)};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = dir_ + "/etcdctl.log";
    std::error_code ignored;
    std::filesystem::remove(out, ignored);
    const pid_t pid = etcd_process_detail::Spawn(argv, out);
    const int code = pid > 0 ? etcd_process_detail::Reap(
                                   pid, etcd_process_detail::Clock::now() + std::chrono::seconds(30))
                             : -1;
    if (code == 0) return true;
    *error = "etcdctl";
    for (const std::string& a : args) *error += " " + a;
    *error += " failed (" + std::to_string(code) + "): " + etcd_process_detail::ReadFile(out);
    return false;
  }

  // Adds the user root with `password` and turns authentication on
  // (etcdctl grants root the root role).
  bool EnableAuth(const std::string& password, std::string* error) const {
    return Etcdctl({"user", "add", "root:" + password, "--interactive=false"}, error) &&
           Etcdctl({"auth", "enable"}, error);
  }

 private:
  struct Member {
    std::string name;
    uint16_t client_port = 0;
    uint16_t tls_port = 0;
    uint16_t peer_port = 0;
    std::string data;
    std::string log;
    pid_t pid = -1;
  };

  explicit EtcdCluster(const Options& options) : options_(options) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "fencegate-etcd-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
  }

  bool tls() const { return !options_.cert_file.empty(); }

  // The string value of the first "name":"value" in a JSON text.
  static std::string Field(const std::string& json, const std::string& name) {
    const std::string quoted = "\"" + name + "\":\"";
    const size_t at = json.find(quoted);
    if (at == std::string::npos) return "";
    const size_t start = at + quoted.size();
    const size_t end = json.find('"', start);
    return end == std::string::npos ? "" : json.substr(start, end - start);
  }

  std::vector<std::string> Argv(size_t i) const {
    const Member& m = members_[i];
    const std::string host = "http://127.0.0.1:";
    std::string cluster;
    for (const Member& each : members_) {
      if (!cluster.empty()) cluster += ",";
      cluster += each.name + "=" + host + std::to_string(each.peer_port);
    }
    std::string listen = host + std::to_string(m.client_port);
    std::string advertise = listen;
    if (tls()) {
      listen += ",https://127.0.0.1:" + std::to_string(m.tls_port);
      advertise = "https://127.0.0.1:" + std::to_string(m.tls_port);
    }
    std::vector<std::string> argv = {
        etcd_process_detail::Binary("FENCEGATE_ETCD", "/usr/bin/etcd"),
        "--name=" + m.name,
        "--data-dir=" + m.data,
        "--listen-client-urls=" + listen,
        "--advertise-client-urls=" + advertise,
        "--listen-peer-urls=" + host + std::to_string(m.peer_port),
        "--initial-advertise-peer-urls=" + host + std::to_string(m.peer_port),
        "--initial-cluster=" + cluster,
        "--initial-cluster-state=new",
        "--initial-cluster-token=" + dir_,
        // Quick elections: a test that kills the leader waits less.
        "--heartbeat-interval=50",
        "--election-timeout=500",
        "--logger=zap",
        "--log-outputs=stderr"};
    if (tls()) {
      argv.push_back("--cert-file=" + options_.cert_file);
      argv.push_back("--key-file=" + options_.key_file);
    }
    return argv;
  }

  bool StartAll(std::string* error) {
    const size_t n = options_.members;
    const std::vector<uint16_t> ports = etcd_process_detail::FreePorts(3 * n);
    if (ports.size() != 3 * n) {
      *error = "etcd: no free ports";
      return false;
    }
    for (size_t i = 0; i < n; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = ports[3 * i];
      m.tls_port = ports[3 * i + 1];
      m.peer_port = ports[3 * i + 2];
      m.data = dir_ + "/" + m.name;
      m.log = dir_ + "/" + m.name + ".log";
      members_.push_back(m);
    }
    for (size_t i = 0; i < n; ++i) {
      members_[i].pid = etcd_process_detail::Spawn(Argv(i), members_[i].log);
      if (members_[i].pid <= 0) {
        *error = "etcd: cannot start " + members_[i].name;
        return false;
      }
    }
    const auto deadline = etcd_process_detail::Clock::now() + options_.start_within;
    for (size_t i = 0; i < n; ++i) {
      if (!WaitHealthy(i, deadline, error)) return false;
    }
    return true;
  }

  // Polls member i's /health until it says true, a member exits, or the
  // deadline passes.
  bool WaitHealthy(size_t i, etcd_process_detail::Clock::time_point deadline,
                   std::string* error) {
    Member& m = members_[i];
    for (;;) {
      const std::string health =
          etcd_process_detail::HttpExchange(m.client_port, "GET", "/health", "");
      if (health.find("\"health\":\"true\"") != std::string::npos) return true;
      for (size_t j = 0; j < members_.size(); ++j) {
        int status = 0;
        if (members_[j].pid > 0 && ::waitpid(members_[j].pid, &status, WNOHANG) == members_[j].pid) {
          members_[j].pid = -1;
          *error = "etcd " + members_[j].name + " exited while starting; its log:\n" + log(j);
          return false;
        }
      }
      if (etcd_process_detail::Clock::now() >= deadline) {
        *error = "etcd " + m.name + " not healthy in time; its log:\n" + log(i);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  Options options_;
  std::string dir_;  // "" when it could not be made
  std::vector<Member> members_;
};

}  // namespace fencegate::testing
