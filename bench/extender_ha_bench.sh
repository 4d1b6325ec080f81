#!/usr/bin/env bash
# bench/extender_ha_bench.sh BUILD_DIR -- 3 gpupool-scheduler-extender replicas
# (--leader-elect) against a real kube-apiserver holding 5,000 fake GPU nodes,
# a burst of 2,000 gpu-mem pods scheduled through them while the Lease holder
# is SIGKILLed every 10 s (bench/extender_ha_bench.py says how). Prints a
# Markdown report on stdout; exit status 1 on an over-commit.
#
# The same etcd + kube-apiserver set-up as extender_bench.sh (its own ports;
# no kubelet, scheduler or containerd); everything it started is stopped on exit.
# Environment: EXTENDER_BIN, NODES (5000), REPLICAS (3), PODS (2000),
# KILL_EVERY (10), EXTENDER_PORT (first replica's port, 29990: below the
# ephemeral range, or a restarted replica may find its port taken by a client
# connection), LEASE (the --leader-elect-lease-duration, renew deadline, retry
# period and fence margin: default 6s,4s,1s,1.5s), K8S_CACHE.
# Logs: /var/tmp/gpupool-bench/logs/<UTC time>/.
# The set-up is extender_bench.sh's; HA_BENCH=1 makes it run this bench.
HA_BENCH=1 EXTENDER_PORT=${EXTENDER_PORT:-29990} exec "$(dirname "$0")/extender_bench.sh" "$@"
