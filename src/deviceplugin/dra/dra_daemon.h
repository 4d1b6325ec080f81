/* dra_daemon.h -- the DRA kubelet plugin program (gpupool-dra-plugin).
 *
 * Reads the options, opens NVML and the inventory, the API client, the
 * claim checkpoint (rolling back interrupted prepares), installs
 * libgpupool-cuda into --isolation-dir, serves registration + DRAPlugin +
 * the health stream (dra_plugin.h), and waits on a signalfd and a 1 s
 * timer that re-serves a socket somebody removed:
 *   SIGTERM / SIGINT / SIGQUIT -> stop serving, remove our sockets, exit 0
 *     (prepared claims stay prepared: their CDI specs and region
 *     directories serve running containers, the checkpoint keeps them).
 * Flags: --help; docs/dra.md. */
#ifndef GP_DRA_DAEMON_H
#define GP_DRA_DAEMON_H

#include "compiler.h"

/* Runs until a terminating signal; returns the exit status. */
GP_MUST_USE int dra_daemon_run(int argc, char **argv, char **envp);

#endif
