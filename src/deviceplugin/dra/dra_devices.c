/* dra_devices.c -- the node's GPUs as DRA devices (see dra_devices.h). */
#include "dra_devices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

static void add_node(struct dra_node_device *d, const char *fmt, int minor)
{
    if (minor < 0 || d->node_count == DRA_MAX_DEVICE_NODES)
        return;
    snprintf(d->nodes[d->node_count++], DRA_NODE_PATH_LEN, fmt, minor);
}

int dra_devices_build(const struct gpu_inventory *inv, struct dra_device_table *t, char *err,
                      size_t errlen)
{
    size_t n = 0;
    for (size_t i = 0; i < inv->count; i++)
        n += inv->gpus[i].mig_enabled ? inv->gpus[i].mig_count : 1;
    t->count = 0;
    t->devices = n ? calloc(n, sizeof *t->devices) : NULL;
    if (n > 0 && t->devices == NULL)
        return gp_errf(err, errlen, "out of memory");
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        if (!g->mig_enabled) {
            struct dra_node_device *d = &t->devices[t->count++];
            snprintf(d->name, sizeof d->name, "gpu-%u", g->index);
            snprintf(d->uuid, sizeof d->uuid, "%s", g->uuid);
            d->memory = g->memory_bytes;
            d->gpu = i;
            d->mig = -1;
            d->lost = g->lost;
            add_node(d, "/dev/nvidia%d", g->minor);
            continue;
        }
        for (size_t k = 0; k < g->mig_count; k++) {
            const struct mig_device *m = &g->migs[k];
            struct dra_node_device *md = &t->devices[t->count++];
            snprintf(md->name, sizeof md->name, "gpu-%u-mig-%u-%u", g->index, m->gpu_instance_id,
                     m->compute_instance_id);
            snprintf(md->uuid, sizeof md->uuid, "%s", m->uuid);
            md->memory = m->memory_bytes;
            md->gpu = i;
            md->mig = (int)k;
            md->lost = g->lost;
            add_node(md, "/dev/nvidia%d", g->minor);
            add_node(md, "/dev/nvidia-caps/nvidia-cap%d", m->gi_access_minor);
            add_node(md, "/dev/nvidia-caps/nvidia-cap%d", m->ci_access_minor);
        }
    }
    return 0;
}

void dra_devices_free(struct dra_device_table *t)
{
    free(t->devices);
    *t = (struct dra_device_table){0};
}

const struct dra_node_device *dra_devices_find(const struct dra_device_table *t, const char *name)
{
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->devices[i].name, name) == 0)
            return &t->devices[i];
    return NULL;
}
