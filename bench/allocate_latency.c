/* allocate_latency -- a C gRPC client against a running plugin socket.
 *
 *   allocate_latency [-n CALLS] SOCKET DEVICE_ID...
 *
 * Measures what the kubelet sees: time to the first ListAndWatch message on
 * a fresh channel, GetDevicePluginOptions, then CALLS sequential Allocate
 * calls (one container asking for the given device IDs) on one channel, the
 * way the kubelet keeps one connection per plugin. Prints a table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "api.pb-c.h"
#include "rpc.h"
#include "rpc_test_client.h"

#define DEFAULT_CALLS 2000
#define WARMUP_CALLS 50
#define TIMEOUT_MS 5000

/* Time from opening a stream to its first message; returns the device count. */
static int first_list(struct rpc_runtime *rt, const char *socket, double *open_us, double *first_us,
                      size_t *bytes)
{
    struct rpc_client *client = NULL;
    struct rpc_watch *watch = NULL;
    struct rpc_buf msg = {0};
    char err[256];
    int devices = -1;

    double t0 = now_us();
    if (rpc_client_open(rt, socket, &client, err, sizeof err) != 0 ||
        rpc_test_watch_open(client, &watch, err, sizeof err) != 0) {
        fprintf(stderr, "ListAndWatch: %s\n", err);
        goto out;
    }
    *open_us = now_us() - t0;
    if (rpc_test_watch_next(watch, TIMEOUT_MS, &msg, NULL, err, sizeof err) != 1) {
        fprintf(stderr, "ListAndWatch: no first message: %s\n", err);
        goto out;
    }
    *first_us = now_us() - t0;
    *bytes = msg.len;
    V1beta1__ListAndWatchResponse *list =
        v1beta1__list_and_watch_response__unpack(NULL, msg.len, msg.data);
    if (list == NULL) {
        fprintf(stderr, "ListAndWatch: cannot decode the first message\n");
        goto out;
    }
    devices = (int)list->n_devices;
    v1beta1__list_and_watch_response__free_unpacked(list, NULL);
out:
    free(msg.data);
    rpc_test_watch_close(watch);
    rpc_client_close(client);
    return devices;
}

static int run_allocate(struct rpc_client *client, const struct rpc_buf *req, int calls,
                        double *samples)
{
    char msg[512];
    for (int i = -WARMUP_CALLS; i < calls; i++) {
        struct rpc_buf resp = {0};
        int status = 0;
        double t0 = now_us();
        if (rpc_test_client_call(client, "/v1beta1.DevicePlugin/Allocate", req->data, req->len,
                                 TIMEOUT_MS, &resp, &status, msg, sizeof msg) != 0) {
            fprintf(stderr, "Allocate failed: status %d: %s\n", status, msg);
            return -1;
        }
        if (i >= 0)
            samples[i] = now_us() - t0;
        free(resp.data);
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: allocate_latency [-n CALLS] SOCKET DEVICE_ID...\n");
}

int main(int argc, char **argv)
{
    int calls = DEFAULT_CALLS, opt;
    while ((opt = getopt(argc, argv, "n:h")) != -1) {
        if (opt == 'n' && atoi(optarg) > 0) {
            calls = atoi(optarg);
        } else {
            usage();
            return 2;
        }
    }
    if (argc - optind < 2) {
        usage();
        return 2;
    }
    const char *socket = argv[optind];
    char err[256];
    struct rpc_runtime *rt = NULL;
    struct rpc_client *client = NULL;
    struct rpc_buf req = {0}, resp = {0};
    double *samples = calloc((size_t)calls, sizeof *samples);
    double open_us = 0, first_us = 0;
    size_t list_bytes = 0;
    int status = 0, rc = 1;

    if (samples == NULL ||
        encode_allocate(argv + optind + 1, (size_t)(argc - optind - 1), &req) != 0) {
        fprintf(stderr, "out of memory\n");
        goto out;
    }
    if (rpc_runtime_start(&rt, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    int devices = first_list(rt, socket, &open_us, &first_us, &list_bytes);
    if (devices < 0)
        goto out;
    if (rpc_client_open(rt, socket, &client, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    double t0 = now_us();
    if (rpc_test_client_call(client, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                             (const uint8_t *)"", 0, TIMEOUT_MS, &resp, &status, err,
                             sizeof err) != 0) {
        fprintf(stderr, "GetDevicePluginOptions failed: status %d: %s\n", status, err);
        goto out;
    }
    double options_us = now_us() - t0;
    if (run_allocate(client, &req, calls, samples) != 0)
        goto out;
    qsort(samples, (size_t)calls, sizeof *samples, compare_double);

    printf("%-44s %12s\n", "measurement", "value");
    printf("%-44s %12d\n", "ListAndWatch devices in first message", devices);
    printf("%-44s %12zu\n", "ListAndWatch first message size (bytes)", list_bytes);
    printf("%-44s %12.1f\n", "ListAndWatch open (us)", open_us);
    printf("%-44s %12.1f\n", "ListAndWatch first message, new channel (us)", first_us);
    printf("%-44s %12.1f\n", "GetDevicePluginOptions, new channel (us)", options_us);
    printf("%-44s %12d\n", "Allocate calls (one channel)", calls);
    printf("%-44s %12d\n", "Allocate device IDs per call", argc - optind - 1);
    printf("%-44s %12.1f\n", "Allocate p50 (us)", percentile(samples, (size_t)calls, 0.50));
    printf("%-44s %12.1f\n", "Allocate p99 (us)", percentile(samples, (size_t)calls, 0.99));
    printf("%-44s %12.1f\n", "Allocate max (us)", samples[calls - 1]);
    rc = 0;
out:
    free(resp.data);
    free(req.data);
    free(samples);
    rpc_client_close(client);
    rpc_runtime_stop(rt);
    return rc;
}
