/* mps_control.h -- the MPS control daemons of sharing.mps, run by the node
 * agent.
 *
 * One nvidia-cuda-mps-control per MPS resource (NVIDIA's layout: the pipe
 * directory is per resource, so a container holding replicas of several
 * GPUs still has one CUDA_MPS_PIPE_DIRECTORY), started with `-d` on the
 * resource's GPUs (CUDA_VISIBLE_DEVICES) and its pipe and log directories
 * under <mps-root>/<resource>/, then told each GPU's default share:
 * set_default_active_thread_percentage 100/replicas and
 * set_default_device_pinned_mem_limit <ordinal> <memory/replicas>M. A
 * watcher thread asks each daemon get_default_active_thread_percentage
 * once a second; a daemon that does not answer is logged and started
 * again (backoff 1 s doubling to 30 s). Stop sends `quit`.
 *
 * Refused before anything starts, with a message naming the cause: a GPU
 * with MIG enabled, a missing control binary (driver too old or not
 * mounted), a daemon that will not start (its own words, e.g. a GPU in
 * exclusive-process mode held by another MPS server).
 *
 * Owner: mps_control_start() allocates, mps_control_stop() frees (NULL
 * is fine). The watcher is the only thread; it reads the copies it made. */
#ifndef GP_MPS_CONTROL_H
#define GP_MPS_CONTROL_H

#include <stddef.h>

#include "config.h"
#include "gpu.h"
#include "plugin.h"
#include "compiler.h"

struct mps_control;

/* Starts the daemons of node's shared resources (cfg->sharing_mps). *out
 * stays NULL when there is nothing to run. */
GP_MUST_USE int mps_control_start(const struct gp_config *cfg, const struct gpu_inventory *inv,
                                  const struct plugin_node *node, struct mps_control **out,
                                  char *err, size_t errlen);

void mps_control_stop(struct mps_control *m);

#endif
