#pragma once
// Service-manager notifications (systemd's sd_notify protocol): a unit with
// Type=notify learns from these when fencegate is ready, reloading or
// stopping. Each sends one datagram to $NOTIFY_SOCKET through libsystemd;
// without that variable (not started by systemd, or another Type=) each does
// nothing. Errors are ignored: the service manager is told, never obeyed.
// Built without libsystemd, each does nothing.
//
// Who calls what:
//   NotifyReady()      once every listener is bound and the "listening" line
//                      is printed (main.cc, Serve), and again when a reload
//                      has finished, with the new configuration in effect
//   NotifyReloading()  when a reload (SIGHUP, POST /v1/reload) starts, before
//                      the new configuration is read
//   NotifyStopping()   when the drain begins (SIGTERM, SIGINT: Server)
//
// Thread-safe: each call is one independent datagram.

namespace fencegate::app {

void NotifyReady();
void NotifyReloading();
void NotifyStopping();

}  // namespace fencegate::app
