/* dra_prepare -- NodePrepareResources / NodeUnprepareResources of one
 * shared-memory claim, in-process, without the API server's round trip.
 *
 * The claim source hands back a ResourceClaim already parsed (what a GET
 * costs is the network and the API server's, not the plugin's); everything
 * else is the plugin's real work on a real file system: resolving the
 * results, the synced checkpoint write before and after, the region
 * directory, the CDI spec (file_replace + fsync), and on unprepare their
 * removal. 8 GPUs of 80 GiB, claims of 1..16 GiB round-robin.
 *
 *   dra_prepare [iterations=1000] [dir=$TMPDIR or /tmp] [cdi-dir=dir]
 *
 * dir holds the checkpoint and the region directories (on a node:
 * /var/lib/kubelet and /var/lib/gpupool, a disk); cdi-dir the CDI specs
 * (/var/run/cdi, a tmpfs on most distributions, where fsync is free).
 *
 * Prints p50 / p99 / max of each, in microseconds (the plugin's log lines
 * go to stderr as in the program: 2>/dev/null). Goal (issue 24): prepare
 * p99 <= 2 ms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_util.h"
#include "dra_devices.h"
#include "dra_prepare.h"

#define GPUS 8
#define DRIVER "gpu.gpupool.io"
#define NODE "bench-node"

static json_t *current; /* the claim the next GET returns */

static int get_claim(void *ctx, const char *ns, const char *name, json_t **out, char *err,
                     size_t errlen)
{
    (void)ctx;
    (void)ns;
    (void)name;
    (void)err;
    (void)errlen;
    *out = json_incref(current);
    return 0;
}

static json_t *make_claim(unsigned i, char *uid, size_t len)
{
    snprintf(uid, len, "0000%04x-bench-4000-8000-%012u", i & 0xffff, i);
    char device[16], memory[16];
    snprintf(device, sizeof device, "gpu-%u", i % GPUS);
    snprintf(memory, sizeof memory, "%uGi", 1 + i % 16);
    return json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:[{s:s,s:s,s:s,s:s,s:s,s:{s:s}}]}}}}", "metadata",
                     "name", "claim", "namespace", "default", "uid", uid, "status", "allocation",
                     "devices", "results", "request", "gpu", "driver", DRIVER, "pool", NODE,
                     "device", device, "shareID", uid, "consumedCapacity", "memory", memory);
}

static void report(const char *what, double *v, size_t n)
{
    qsort(v, n, sizeof *v, compare_double);
    printf("%-10s n=%zu p50=%.0fus p99=%.0fus max=%.0fus\n", what, n, percentile(v, n, 0.5),
           percentile(v, n, 0.99), v[n - 1]);
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1000;
    const char *tmp = argc > 2 ? argv[2] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    const char *cdi_tmp = argc > 3 ? argv[3] : tmp;
    char root[512], cdi_root[512], state[600], cdi[600], iso[600], cmd[1200];
    snprintf(root, sizeof root, "%s/gp-dra-bench-XXXXXX", tmp);
    snprintf(cdi_root, sizeof cdi_root, "%s/gp-dra-bench-cdi-XXXXXX", cdi_tmp);
    if (n == 0 || mkdtemp(root) == NULL || mkdtemp(cdi_root) == NULL) {
        fprintf(stderr, "usage: dra_prepare [iterations>0] [dir] [cdi-dir]\n");
        return 2;
    }
    snprintf(state, sizeof state, "%s/state", root);
    snprintf(cdi, sizeof cdi, "%s/cdi", cdi_root);
    snprintf(iso, sizeof iso, "%s/isolation", root);
    if (mkdir(iso, 0755) != 0) {
        perror(iso);
        return 1;
    }

    struct dra_device_table t = {.count = GPUS, .devices = calloc(GPUS, sizeof *t.devices)};
    for (unsigned g = 0; t.devices != NULL && g < GPUS; g++) {
        struct dra_node_device *d = &t.devices[g];
        snprintf(d->name, sizeof d->name, "gpu-%u", g);
        snprintf(d->uuid, sizeof d->uuid, "GPU-%08x-0000-4000-8000-000000000000", g);
        d->memory = 80ull << 30;
        d->gpu = g;
        d->mig = -1;
        d->node_count = 1;
        snprintf(d->nodes[0], sizeof d->nodes[0], "/dev/nvidia%u", g);
    }
    const struct dra_edits_options edits = {
        .driver = DRIVER, .cdi_root = cdi, .isolation_dir = iso, .dev_root = "/"};
    const struct dra_claim_source source = {.get = get_claim};
    struct dra_preparer p;
    char err[1024];
    double *prep = calloc(n, sizeof *prep), *unprep = calloc(n, sizeof *unprep);
    if (t.devices == NULL || prep == NULL || unprep == NULL ||
        dra_preparer_open(&p, state, &edits, &t, NODE, &source, err, sizeof err) != 0) {
        fprintf(stderr, "setup: %s\n", err);
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char uid[64];
        current = make_claim((unsigned)i, uid, sizeof uid);
        const struct dra_claim_entry *e = NULL;
        double t0 = now_us();
        if (current == NULL ||
            dra_prepare_claim(&p, "default", "claim", uid, &e, err, sizeof err) != 0) {
            fprintf(stderr, "prepare %zu: %s\n", i, err);
            rc = 1;
        }
        double t1 = now_us();
        if (rc == 0 && dra_unprepare_claim(&p, uid, err, sizeof err) != 0) {
            fprintf(stderr, "unprepare %zu: %s\n", i, err);
            rc = 1;
        }
        double t2 = now_us();
        prep[i] = t1 - t0;
        unprep[i] = t2 - t1;
        json_decref(current);
    }
    if (rc == 0) {
        printf("dra_prepare: one shared claim, %zu times; checkpoint in %s, CDI specs in %s (both "
               "synced)\n",
               n, tmp, cdi_tmp);
        report("prepare", prep, n);
        report("unprepare", unprep, n);
    }
    dra_preparer_close(&p);
    free(t.devices);
    free(prep);
    free(unprep);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", root, cdi_root);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", root);
    return rc;
}
