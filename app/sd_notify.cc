#include "app/sd_notify.h"

#ifdef FENCEGATE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include <ctime>
#include <string>

namespace fencegate::app {

namespace {

void Notify(const std::string& state) {
#ifdef FENCEGATE_HAVE_SYSTEMD
  // unset_environment 0: a reload notifies again later.
  (void)sd_notify(0, state.c_str());
#else
  (void)state;
#endif
}

// CLOCK_MONOTONIC in microseconds: systemd (253 and later) wants it beside
// RELOADING=1 for Type=notify-reload; older versions ignore the field.
std::string MonotonicUsec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::to_string(static_cast<long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000);
}

}  // namespace

void NotifyReady() { Notify("READY=1\nSTATUS=listening"); }

void NotifyReloading() { Notify("RELOADING=1\nMONOTONIC_USEC=" + MonotonicUsec()); }

void NotifyStopping() { Notify("STOPPING=1\nSTATUS=draining"); }

}  // namespace fencegate::app
