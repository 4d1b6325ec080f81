/* snapshot_bench -- ListAndWatch snapshot size and encode time.
 *
 * Builds the node the way the plugin does (resource set + plugin handlers)
 * from hand-made inventories, then times the snapshot handler the RPC
 * thread calls on every health change. Prints one table row per shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "fixtures.h"
#include "plugin.h"

#define ROUNDS 2000

static int measure(const char *label, struct gpu_inventory *inv, struct gp_config *cfg)
{
    struct plugin_node node;
    char err[256];
    if (plugin_node_init(&node, cfg, inv, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", label, err);
        return -1;
    }
    static double samples[ROUNDS];
    size_t devices = 0, bytes = 0;
    for (size_t r = 0; r < node.resources.count; r++) {
        struct rpc_handlers h = plugin_node_handlers(&node, r);
        struct rpc_buf buf;
        uint64_t gen;
        for (int i = 0; i < ROUNDS; i++) {
            double t0 = now_us();
            if (h.snapshot(h.ctx, &buf, &gen) != 0) {
                fprintf(stderr, "%s: snapshot failed\n", label);
                plugin_node_free(&node);
                return -1;
            }
            double t1 = now_us();
            samples[i] = r == 0 ? t1 - t0 : samples[i] + (t1 - t0);
            if (i + 1 < ROUNDS)
                free(buf.data);
        }
        devices += node.resources.resources[r].device_count;
        bytes += buf.len;
        free(buf.data);
    }
    qsort(samples, ROUNDS, sizeof samples[0], compare_double);
    printf("| %-34s | %9zu | %7zu | %11zu | %8.1f | %8.1f |\n", label, node.resources.count,
           devices, bytes, samples[ROUNDS / 2], samples[ROUNDS * 99 / 100]);
    plugin_node_free(&node);
    return 0;
}

int main(void)
{
    struct gpu_inventory inv;
    struct gp_config cfg;
    int rc = 0;

    printf("| %-34s | %9s | %7s | %11s | %8s | %8s |\n", "ListAndWatch snapshot", "resources",
           "devices", "bytes (sum)", "p50 µs", "p99 µs");
    printf("|%s|%s|%s|%s|%s|%s|\n", "------------------------------------", "-----------",
           "---------", "-------------", "----------", "----------");

    fixture_inventory(&inv, 8, 1);
    fixture_config(&cfg);
    rc |= measure("8 GPUs", &inv, &cfg);
    fixture_time_slice(&cfg, "nvidia.com/gpu", 64);
    rc |= measure("8 GPUs x 64 replicas", &inv, &cfg);
    free(cfg.time_slices);
    fixture_inventory_free(&inv);

    fixture_inventory(&inv, 8, 1);
    static const char *profiles[] = {"1g.5gb", "2g.10gb", "3g.20gb"};
    static const size_t counts[] = {7, 3, 2};
    for (size_t g = 0; g < 8; g++)
        fixture_mig(&inv, g, counts[g % 3], profiles[g % 3]);
    fixture_config(&cfg);
    cfg.mig_strategy = MIG_STRATEGY_MIXED;
    rc |= measure("8 A100 MIG mixed (all resources)", &inv, &cfg);
    fixture_inventory_free(&inv);
    return rc ? 1 : 0;
}
