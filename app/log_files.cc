#include "app/log_files.h"

#include <spdlog/details/file_helper.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <mutex>
#include <utility>

namespace fencegate {

// spdlog's basic_file_sink cannot reopen its file without truncating it,
// and its file_helper::reopen closes the old file before opening the new
// one (a failed open would leave it writing to no file): this sink opens
// the new file first and swaps it in under the sink's lock, so a line goes
// whole to the old file or whole to the new one. Every line is flushed as
// it is written: one write(2) per line, as on standard error, and nothing
// is held back in a buffer when the file is swapped or fencegate dies.
class ReopenableFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ReopenableFileSink(std::string path) : path_(std::move(path)) {
    file_ = Open();  // throws spdlog::spdlog_ex
  }

  const std::string& path() const { return path_; }

  void Reopen() {
    std::unique_ptr<spdlog::details::file_helper> fresh = Open();  // throws; the old one stays
    {
      std::lock_guard lock(mutex_);
      std::swap(file_, fresh);
    }
    // `fresh` (the old file) closes here, outside the lock; its lines were
    // flushed as they were written.
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_->write(line);
    file_->flush();
  }
  void flush_() override { file_->flush(); }

 private:
  std::unique_ptr<spdlog::details::file_helper> Open() const {
    auto file = std::make_unique<spdlog::details::file_helper>();
    file->open(path_, /*truncate=*/false);
    return file;
  }

  const std::string path_;
  std::unique_ptr<spdlog::details::file_helper> file_;  // guarded by mutex_
};

namespace {

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name,
                                           std::shared_ptr<spdlog::sinks::sink> sink) {
  auto logger = std::make_shared<spdlog::logger>(name, std::move(sink));
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace

LogFiles::LogFiles() = default;

LogFiles::~LogFiles() {
  if (thread_.joinable()) {
    ioc_.stop();
    thread_.join();
  }
}

bool LogFiles::Open(const config::LogConfig& log, std::string* error) {
  auto sink_for = [&](const config::FileRef& file) -> std::shared_ptr<spdlog::sinks::sink> {
    if (file.empty()) return std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto sink = std::make_shared<ReopenableFileSink>(file.path);
    files_.push_back(sink);
    return sink;
  };
  try {
    auto app = MakeLogger("fencegate", sink_for(log.file));
    app->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
    spdlog::set_default_logger(app);
    spdlog::set_level(spdlog::level::from_str(log.level));
    auto access = MakeLogger("access", sink_for(log.access_log_file));
    access->set_pattern("%v");
    access->set_level(spdlog::level::info);
  } catch (const spdlog::spdlog_ex& e) {
    *error = e.what();
    return false;
  }
  return true;
}

void LogFiles::WatchReopenSignal() {
  signals_.emplace(ioc_, SIGUSR1);
  AwaitSignal();
  thread_ = std::thread([this] { ioc_.run(); });
}

void LogFiles::AwaitSignal() {
  signals_->async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    Reopen();
    AwaitSignal();
  });
}

void LogFiles::Reopen() {
  if (files_.empty()) {
    spdlog::info("SIGUSR1: no log file to reopen (log.file and log.access_log_file are not set)");
    return;
  }
  for (const auto& file : files_) {
    try {
      file->Reopen();
      spdlog::info("SIGUSR1: reopened {}", file->path());
    } catch (const spdlog::spdlog_ex& e) {
      spdlog::error("SIGUSR1: cannot reopen {} ({}); writing on to the file it had", file->path(),
                    e.what());
    }
  }
}

}  // namespace fencegate
