/* daemon.h -- the device plugin's supervisor.
 *
 * Owns everything with a lifetime: configuration, NVML, the inventory, the
 * per-resource gRPC servers and their registrations, the health monitor.
 * One thread (the caller's) waits on a signalfd, an inotify watch of the
 * kubelet's socket directory and a retry timer:
 *   kubelet.sock created        -> restart the servers and register again
 *   one of our sockets deleted  -> the same (the kubelet wiped the dir)
 *   SIGHUP                      -> reload configuration and NVML, restart
 *   SIGTERM / SIGINT / SIGQUIT  -> end streams, remove sockets, exit 0
 *   timer                       -> retry registrations that failed */
#ifndef GP_DAEMON_H
#define GP_DAEMON_H

#include "compiler.h"

/* Runs the plugin until a terminating signal; returns the exit status. */
GP_MUST_USE int daemon_run(int argc, char **argv, char **envp);

#endif
