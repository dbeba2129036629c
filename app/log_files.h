#pragma once
// Where the logs go (log.file, log.access_log_file; standard error when not
// set) and their reopening on SIGUSR1, after logrotate renamed them
// (docs/operations.md, "Logs").

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"

namespace fencegate {

class ReopenableFileSink;

class LogFiles {
 public:
  LogFiles();
  ~LogFiles();  // stops the watch and joins its thread
  LogFiles(const LogFiles&) = delete;
  LogFiles& operator=(const LogFiles&) = delete;

  // Makes "fencegate" (the default logger, `<time> <level> <message>`) and
  // "access" (the access log's JSON lines, as they are) write where `log`
  // says. false + *error when a file cannot be opened.
  bool Open(const config::LogConfig& log, std::string* error);

  // From now on SIGUSR1 reopens every log file, on a thread of its own, and
  // says so at info; without a file it only says there was none. Call once,
  // before other threads start (they inherit no different signal mask).
  void WatchReopenSignal();

  // Opens each file's path anew and writes there from the next line on; a
  // file that cannot be opened keeps the one it had (and an error says so).
  // Any thread.
  void Reopen();

 private:
  void AwaitSignal();  // on thread_

  std::vector<std::shared_ptr<ReopenableFileSink>> files_;
  boost::asio::io_context ioc_;
  std::optional<boost::asio::signal_set> signals_;
  std::thread thread_;
};

}  // namespace fencegate
