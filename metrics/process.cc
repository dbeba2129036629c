// The process_* families (exposition.h): what Prometheus clients report of
// their own process, read from /proc at scrape time.

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "metrics/exposition.h"

namespace fencegate::metrics {

namespace {

std::string ReadAll(const char* path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The fields of /proc/self/stat after the command name (which may hold
// spaces and parentheses): fields[0] is field 3 (state) of proc(5).
std::vector<std::string> StatFields() {
  std::string stat = ReadAll("/proc/self/stat");
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 1));
  return {std::istream_iterator<std::string>(rest), std::istream_iterator<std::string>()};
}

// The boot time (btime of /proc/stat), in seconds since the epoch; 0 if unknown.
double BootTime() {
  std::istringstream in(ReadAll("/proc/stat"));
  std::string word;
  while (in >> word) {
    if (word == "btime") {
      double t = 0;
      in >> t;
      return t;
    }
  }
  return 0;
}

// The soft limit of open files (/proc/self/limits); 0 if unknown.
double MaxFds() {
  std::istringstream in(ReadAll("/proc/self/limits"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream fields(line.substr(14));
    std::string soft;
    fields >> soft;
    return soft == "unlimited" ? 0 : std::stod(soft);
  }
  return 0;
}

}  // namespace

void AddProcessFamilies(Families* out) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::vector<std::string> f = StatFields();
  // proc(5): starttime 22, vsize 23, rss 24.
  constexpr size_t kFirst = 3;
  auto field = [&](size_t n) { return std::stod(f[n - kFirst]); };
  // getrusage, not utime and stime of /proc/self/stat: those are whole clock
  // ticks (10 ms), so a process that mostly waits reads 0 for a long time.
  if (rusage use{}; getrusage(RUSAGE_SELF, &use) == 0) {
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
    };
    AddCounter(out, "process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
               seconds(use.ru_utime) + seconds(use.ru_stime));
  }
  if (f.size() > 24 - kFirst && ticks > 0) {
    AddGauge(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", field(23));
    AddGauge(out, "process_resident_memory_bytes", "Resident memory size in bytes.",
             field(24) * page);
    if (double boot = BootTime(); boot > 0) {
      AddGauge(out, "process_start_time_seconds",
               "Start time of the process since the Unix epoch, in seconds.",
               boot + field(22) / ticks);
    }
  }
  std::error_code ec;
  size_t fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++fds;
  }
  // The directory's own descriptor, open while it was listed, is not counted.
  if (!ec && fds > 0) {
    AddGauge(out, "process_open_fds", "Number of open file descriptors.",
             static_cast<double>(fds - 1));
  }
  if (double max = MaxFds(); max > 0) {
    AddGauge(out, "process_max_fds", "Maximum number of open file descriptors.", max);
  }
}

}  // namespace fencegate::metrics
