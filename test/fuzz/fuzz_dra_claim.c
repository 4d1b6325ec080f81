/* fuzz_dra_claim.c -- what the DRA plugin reads from outside: a
 * ResourceClaim from the API server (dra_claim_resolve, opaque GpuConfig
 * included) and its own checkpoint file, which a crash, a full disk or a
 * person may have left in any state (dra_checkpoint_load). The input is
 * both. Invariants: a refusal says why; an accepted claim's devices are
 * devices of the node with a limit within the device's memory and a CDI ID
 * of our kind; an accepted checkpoint has no UID twice. Seeds:
 * corpus/dra_claim/ (claims as the API server sends them, a checkpoint). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra_checkpoint.h"
#include "dra_claim.h"
#include "dra_devices.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct dra_device_table table;

static void build_table(void)
{
    static struct dra_node_device devices[3];
    static const char *const names[] = {"gpu-0", "gpu-1", "gpu-2-mig-7-0"};
    for (size_t i = 0; i < 3; i++) {
        strcpy(devices[i].name, names[i]);
        snprintf(devices[i].uuid, sizeof devices[i].uuid, "GPU-0000000%zu-aaaa-bbbb-cccc-dddd", i);
        devices[i].memory = i < 2 ? 16ull << 30 : 5ull << 30;
        devices[i].gpu = i;
        devices[i].mig = i < 2 ? -1 : 0;
        devices[i].node_count = 1;
        snprintf(devices[i].nodes[0], sizeof devices[i].nodes[0], "/dev/nvidia%zu", i);
    }
    table.count = 3;
    table.devices = devices;
}

static void claim(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, 0, &je);
    if (root == NULL)
        return;
    struct dra_claim_entry e = {0};
    strcpy(e.uid, "u-1");
    strcpy(e.ns, "default");
    strcpy(e.name, "c");
    const struct dra_claim_scope scope = {"gpu.gpupool.io", "node1", &table};
    char err[512] = "";
    if (dra_claim_resolve(root, &scope, &e, err, sizeof err) != 0) {
        if (err[0] == '\0' || e.devices != NULL)
            abort();
    } else {
        for (size_t i = 0; i < e.device_count; i++) {
            const struct dra_node_device *d = dra_devices_find(&table, e.devices[i].device);
            if (d == NULL || e.devices[i].limit >= d->memory ||
                strncmp(e.devices[i].cdi_id, "k8s.gpu.gpupool.io/claim=u-1-", 29) != 0)
                abort();
        }
        free(e.devices);
    }
    struct dra_gpu_config cfg;
    err[0] = '\0';
    if (dra_config_parse(root, &cfg, err, sizeof err) != 0 && err[0] == '\0')
        abort();
    json_decref(root);
}

static void checkpoint(const uint8_t *data, size_t size)
{
    struct dra_checkpoint cp;
    char err[1024] = "";
    int rc = dra_checkpoint_load(&cp, fz_file(data, size), err, sizeof err);
    if (rc != 0 && (err[0] == '\0' || cp.count != 0))
        abort();
    for (size_t i = 0; rc == 0 && i < cp.count; i++)
        for (size_t k = i + 1; k < cp.count; k++)
            if (strcmp(cp.entries[i].uid, cp.entries[k].uid) == 0)
                abort();
    dra_checkpoint_free(&cp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    if (table.devices == NULL)
        build_table();
    claim(data, size);
    checkpoint(data, size);
    return 0;
}
