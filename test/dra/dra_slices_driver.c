/* dra_slices_driver.c -- a test-only driver of the ResourceSlice publisher
 * (dra_slices.h) for test/integration/test_dra_slices.py. Not a product:
 * it makes an inventory of identical GPUs (no NVML), starts the publisher
 * and turns lines on stdin into its calls.
 *
 *   dra_slices_driver --kubeconfig P --node N [--driver D] [--gpus N]
 *       [--memory-mib M] [--mig-gpu I] [--lost-gpu I] [--per-slice N]
 *       [--consumable auto|on|off] [--cuda-driver-version 12040] [--state]
 *   dra_slices_driver --kubeconfig P --node N [--driver D] --remove-and-exit
 *
 * --state: the health comes from a node_state the publisher follows
 * (dra_slices_follow); "gpu I 0|1" and "mig I J 0|1" change it.
 * stdin: "unhealthy I" / "healthy I" (dra_slices_health_changed),
 *   "wait MS" (dra_slices_wait_published; prints PUBLISHED 0|1),
 *   "status" (STATUS gen=.. slices=.. devices=.. consumable=0|1 known=0|1
 *   rounds=.. failures=..), "stop" / "stop-remove" (dra_slices_stop,
 *   without / with remove); EOF = stop.
 * stdout: READY once started, then one answer per line; RESULT OK|ERROR at
 * the end. */
#include "dra_slices.h"
#include "node_state.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void make_inventory(struct gpu_inventory *inv, size_t count, unsigned long long memory,
                           long mig_gpu, long lost_gpu)
{
    memset(inv, 0, sizeof *inv);
    inv->count = count;
    inv->gpus = calloc(count > 0 ? count : 1, sizeof *inv->gpus);
    if (inv->gpus == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    snprintf(inv->driver_version, sizeof inv->driver_version, "535.104.05");
    for (size_t i = 0; i < count; i++) {
        struct gpu_device *g = &inv->gpus[i];
        snprintf(g->uuid, sizeof g->uuid, "GPU-%08zx-1111-2222-3333-444444444444", i);
        snprintf(g->name, sizeof g->name, "NVIDIA A100-SXM4-40GB");
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02zX:00.0", 0x10 + i);
        g->index = (unsigned)i;
        g->minor = (int)i;
        g->memory_bytes = memory;
        g->cc_major = 8;
        g->cc_minor = 0;
        g->lost = (long)i == lost_gpu;
        if ((long)i == mig_gpu) {
            g->mig_capable = g->mig_enabled = true;
            g->mig_count = 2;
            g->migs = calloc(2, sizeof *g->migs);
            if (g->migs == NULL)
                exit(1);
            for (unsigned j = 0; j < 2; j++) {
                struct mig_device *m = &g->migs[j];
                snprintf(m->uuid, sizeof m->uuid, "MIG-%08zx-%u", i, j);
                m->index = j;
                m->gpu_instance_id = 7 + j;
                m->compute_instance_id = 0;
                snprintf(m->profile, sizeof m->profile, "1g.5gb");
                m->memory_bytes = 5ULL << 30;
            }
        }
    }
}

int main(int argc, char **argv)
{
    const char *kubeconfig = NULL;
    struct dra_slices_options opt = {.driver = "gpu.gpupool.io"};
    size_t gpus = 2;
    unsigned long long memory_mib = 16384;
    long mig_gpu = -1, lost_gpu = -1;
    bool remove_and_exit = false, follow_state = false;
    static const struct option longopts[] = {
        {"kubeconfig", required_argument, NULL, 'k'},
        {"node", required_argument, NULL, 'n'},
        {"driver", required_argument, NULL, 'd'},
        {"gpus", required_argument, NULL, 'g'},
        {"memory-mib", required_argument, NULL, 'm'},
        {"mig-gpu", required_argument, NULL, 'M'},
        {"lost-gpu", required_argument, NULL, 'L'},
        {"per-slice", required_argument, NULL, 'p'},
        {"consumable", required_argument, NULL, 'c'},
        {"cuda-driver-version", required_argument, NULL, 'C'},
        {"remove-and-exit", no_argument, NULL, 'r'},
        {"state", no_argument, NULL, 's'},
        {0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'k':
            kubeconfig = optarg;
            break;
        case 'n':
            opt.node = optarg;
            break;
        case 'd':
            opt.driver = optarg;
            break;
        case 'g':
            gpus = (size_t)atol(optarg);
            break;
        case 'm':
            memory_mib = strtoull(optarg, NULL, 10);
            break;
        case 'M':
            mig_gpu = atol(optarg);
            break;
        case 'L':
            lost_gpu = atol(optarg);
            break;
        case 'p':
            opt.max_devices_per_slice = (size_t)atol(optarg);
            break;
        case 'c':
            if (dra_consumable_parse(optarg, &opt.consumable) != 0) {
                fprintf(stderr, "--consumable: auto, on or off\n");
                return 64;
            }
            break;
        case 'C':
            opt.cuda_driver_version = atoi(optarg);
            break;
        case 'r':
            remove_and_exit = true;
            break;
        case 's':
            follow_state = true;
            break;
        default:
            return 64;
        }
    }
    char err[1024];
    const struct kube_client_options kopt = {.kubeconfig = kubeconfig};
    struct kube_client *client = kube_client_new(&kopt, err, sizeof err);
    if (client == NULL) {
        printf("RESULT ERROR %s\n", err);
        return 1;
    }
    opt.client = client;
    if (remove_and_exit) {
        int rc = dra_slices_remove_all(client, opt.driver, opt.node, err, sizeof err);
        printf(rc == 0 ? "RESULT OK\n" : "RESULT ERROR %s\n", err);
        kube_client_free(client);
        return rc == 0 ? 0 : 1;
    }
    struct gpu_inventory inv;
    make_inventory(&inv, gpus, memory_mib << 20, mig_gpu, lost_gpu);
    bool *healthy = calloc(gpus > 0 ? gpus : 1, sizeof *healthy);
    for (size_t i = 0; healthy != NULL && i < gpus; i++)
        healthy[i] = true;
    struct dra_slices *s = NULL;
    if (healthy == NULL || dra_slices_start(&opt, &inv, healthy, &s, err, sizeof err) != 0) {
        printf("RESULT ERROR %s\n", healthy == NULL ? "out of memory" : err);
        free(healthy);
        gpu_inventory_free(&inv);
        kube_client_free(client);
        return 1;
    }
    struct node_state state = {0};
    if (follow_state && (node_state_init(&state, &inv, err, sizeof err) != 0 ||
                         dra_slices_follow(s, &state, err, sizeof err) != 0)) {
        printf("RESULT ERROR %s\n", err);
        return 1;
    }
    printf("READY\n");
    fflush(stdout);
    bool remove = false;
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL) {
        long arg = 0, arg2 = 0, arg3 = 0;
        if (sscanf(line, "gpu %ld %ld", &arg, &arg2) == 2) {
            (void)node_state_set_gpu_health(&state, (size_t)arg, arg2 != 0);
        } else if (sscanf(line, "mig %ld %ld %ld", &arg, &arg2, &arg3) == 3) {
            (void)node_state_set_mig_health(&state, (size_t)arg, (int)arg2, arg3 != 0);
        } else if (sscanf(line, "unhealthy %ld", &arg) == 1 && arg >= 0 && (size_t)arg < gpus) {
            healthy[arg] = false;
            dra_slices_health_changed(s, healthy);
        } else if (sscanf(line, "healthy %ld", &arg) == 1 && arg >= 0 && (size_t)arg < gpus) {
            healthy[arg] = true;
            dra_slices_health_changed(s, healthy);
        } else if (sscanf(line, "wait %ld", &arg) == 1) {
            printf("PUBLISHED %d\n", dra_slices_wait_published(s, arg) ? 1 : 0);
        } else if (strncmp(line, "status", 6) == 0) {
            struct dra_slices_status st;
            dra_slices_status(s, &st);
            printf("STATUS gen=%lld slices=%zu devices=%zu consumable=%d known=%d rounds=%llu "
                   "failures=%llu\n",
                   (long long)st.generation, st.slices, st.devices, st.consumable ? 1 : 0,
                   st.consumable_known ? 1 : 0, (unsigned long long)st.write_rounds,
                   (unsigned long long)st.write_failures);
        } else if (strncmp(line, "stop-remove", 11) == 0) {
            remove = true;
            break;
        } else if (strncmp(line, "stop", 4) == 0) {
            break;
        }
        fflush(stdout);
    }
    int rc = dra_slices_stop(s, remove, err, sizeof err);
    node_state_free(&state);
    printf(rc == 0 ? "RESULT OK\n" : "RESULT ERROR %s\n", err);
    free(healthy);
    gpu_inventory_free(&inv);
    kube_client_free(client);
    return rc == 0 ? 0 : 1;
}
