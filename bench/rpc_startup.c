/* rpc_startup -- where the transport's start-up time and memory go.
 *
 *   rpc_startup [-n ROUNDS]
 *
 * The launcher plays the kubelet: it serves Registration on a temporary
 * kubelet.sock (calling GetDevicePluginOptions back inside Register, as the
 * kubelet does) and ROUNDS times spawns itself in "plugin" mode. A plugin is
 * the transport alone: grpc_init + cq thread, a DevicePlugin server with an
 * 8-GPU device list, Register. The launcher takes exec -> Register from the
 * moment before posix_spawn to the moment Register reaches its handler
 * (CLOCK_MONOTONIC is system-wide); the plugin reports its phases and its
 * RSS after registration on a pipe. Prints medians and worst cases. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "api.pb-c.h"
#include "rpc.h"
#include "rpc_test_client.h"

#define DEFAULT_ROUNDS 20
#define GPUS 8
#define TIMEOUT_MS 5000

extern char **environ;

/* ---- plugin mode ------------------------------------------------------------ */

static int pack_message(const ProtobufCMessage *m, struct rpc_buf *out)
{
    out->len = protobuf_c_message_get_packed_size(m);
    out->data = malloc(out->len + 1);
    if (out->data == NULL)
        return -1;
    protobuf_c_message_pack(m, out->data);
    return 0;
}

static int plugin_snapshot(void *ctx, struct rpc_buf *out, uint64_t *generation)
{
    V1beta1__Device devices[GPUS], *ptrs[GPUS];
    char ids[GPUS][48];
    for (int i = 0; i < GPUS; i++) {
        v1beta1__device__init(&devices[i]);
        snprintf(ids[i], sizeof ids[i], "GPU-%08d-0000-0000-0000-000000000000", i);
        devices[i].id = ids[i];
        devices[i].health = "Healthy";
        ptrs[i] = &devices[i];
    }
    V1beta1__ListAndWatchResponse list = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    list.n_devices = GPUS;
    list.devices = ptrs;
    *generation = 1;
    return pack_message(&list.base, out);
}

/* Only what registration needs: the kubelet calls GetDevicePluginOptions. */
enum { BENCH_OPTIONS, BENCH_LIST_AND_WATCH };
static const struct rpc_method BENCH_METHODS[] = {
    [BENCH_OPTIONS] = {"/v1beta1.DevicePlugin/GetDevicePluginOptions", RPC_METHOD_UNARY},
    [BENCH_LIST_AND_WATCH] = {"/v1beta1.DevicePlugin/ListAndWatch", RPC_METHOD_STREAM},
};

static enum rpc_status plugin_unary(void *ctx, struct rpc_call *call, size_t method,
                                    const uint8_t *req, size_t len, struct rpc_buf *resp, char *msg,
                                    size_t msglen)
{
    V1beta1__DevicePluginOptions options = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    if (method != BENCH_OPTIONS) {
        snprintf(msg, msglen, "not in this benchmark");
        return RPC_UNIMPLEMENTED;
    }
    return pack_message(&options.base, resp) == 0 ? RPC_OK : RPC_RESOURCE_EXHAUSTED;
}

static long status_field_kb(const char *name)
{
    char line[256];
    long value = -1;
    size_t len = strlen(name);
    FILE *fp = fopen("/proc/self/status", "r");
    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof line, fp) != NULL)
        if (strncmp(line, name, len) == 0 && line[len] == ':')
            value = strtol(line + len + 1, NULL, 10);
    fclose(fp);
    return value;
}

static int plugin_main(const char *kubelet_socket, const char *plugin_socket, int report_fd)
{
    double t_main = now_us();
    char err[256];
    struct rpc_runtime *rt = NULL;
    struct rpc_server *srv = NULL;
    struct rpc_handlers handlers = {.methods = BENCH_METHODS,
                                    .method_count = 2,
                                    .unary = plugin_unary,
                                    .snapshot = plugin_snapshot};
    struct rpc_buf req = {0};
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* as the plugin does before grpc_init */

    if (rpc_runtime_start(&rt, err, sizeof err) != 0)
        goto fail;
    double t_runtime = now_us();
    if (rpc_server_start(rt, plugin_socket, &handlers, &srv, err, sizeof err) != 0)
        goto fail;
    double t_server = now_us();
    V1beta1__DevicePluginOptions options = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    V1beta1__RegisterRequest reg = V1BETA1__REGISTER_REQUEST__INIT;
    reg.version = "v1beta1";
    reg.endpoint = strrchr(plugin_socket, '/') + 1;
    reg.resource_name = "nvidia.com/gpu";
    reg.options = &options;
    if (pack_message(&reg.base, &req) != 0 ||
        rpc_test_register(rt, kubelet_socket, req.data, req.len, TIMEOUT_MS, err, sizeof err) != 0)
        goto fail;
    double t_registered = now_us();
    dprintf(report_fd, "%.1f %.1f %.1f %.1f %ld %ld %ld %ld %ld\n", t_main, t_runtime, t_server,
            t_registered, status_field_kb("VmRSS"), status_field_kb("VmHWM"),
            status_field_kb("RssAnon"), status_field_kb("RssFile"), status_field_kb("Threads"));
    free(req.data);
    rpc_server_stop(srv);
    rpc_runtime_stop(rt);
    return 0;
fail:
    fprintf(stderr, "plugin: %s\n", err);
    free(req.data);
    rpc_server_stop(srv);
    rpc_runtime_stop(rt);
    return 1;
}

/* ---- launcher (the kubelet) ------------------------------------------------------ */

struct kubelet {
    struct rpc_runtime *rt;
    pthread_mutex_t lock;
    pthread_cond_t registered;
    double arrival_us;
    char plugin_socket[128];
};

static enum rpc_status kubelet_register(void *ctx, const uint8_t *req, size_t len, char *msg,
                                        size_t msglen)
{
    struct kubelet *k = ctx;
    double arrival = now_us();
    struct rpc_buf resp = {0};
    int status = 0;
    char err[256];
    /* The kubelet asks for the options before Register returns. */
    if (rpc_test_call(k->rt, k->plugin_socket, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                      (const uint8_t *)"", 0, TIMEOUT_MS, &resp, &status, err, sizeof err) != 0) {
        snprintf(msg, msglen, "GetDevicePluginOptions failed: %s", err);
        return RPC_UNAVAILABLE;
    }
    free(resp.data);
    pthread_mutex_lock(&k->lock);
    k->arrival_us = arrival;
    pthread_cond_signal(&k->registered);
    pthread_mutex_unlock(&k->lock);
    return RPC_OK;
}

struct sample {
    double exec_to_register, exec_to_main, runtime, server, register_arrival, register_done;
    long rss_kb, hwm_kb, anon_kb, file_kb, threads;
};

static int one_round(struct kubelet *k, char *self, const char *kubelet_socket, struct sample *s)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    char fd_text[16];
    snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
    char *args[] = {self, "plugin", (char *)kubelet_socket, k->plugin_socket, fd_text, NULL};
    pid_t pid;
    pthread_mutex_lock(&k->lock);
    k->arrival_us = 0;
    pthread_mutex_unlock(&k->lock);

    double t_exec = now_us();
    int rc = posix_spawn(&pid, self, NULL, NULL, args, environ);
    close(fds[1]);
    if (rc != 0) {
        fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
        close(fds[0]);
        return -1;
    }
    char line[256] = "";
    FILE *report = fdopen(fds[0], "r");
    if (report == NULL || fgets(line, sizeof line, report) == NULL)
        line[0] = '\0';
    if (report != NULL)
        fclose(report);
    else
        close(fds[0]);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);

    double t_main, t_runtime, t_server, t_registered;
    if (sscanf(line, "%lf %lf %lf %lf %ld %ld %ld %ld %ld", &t_main, &t_runtime, &t_server,
               &t_registered, &s->rss_kb, &s->hwm_kb, &s->anon_kb, &s->file_kb, &s->threads) != 9) {
        fprintf(stderr, "plugin round failed (exit status %d)\n", wstatus);
        return -1;
    }
    pthread_mutex_lock(&k->lock);
    double arrival = k->arrival_us;
    pthread_mutex_unlock(&k->lock);
    s->exec_to_register = (arrival - t_exec) / 1e3;
    s->exec_to_main = (t_main - t_exec) / 1e3;
    s->runtime = (t_runtime - t_main) / 1e3;
    s->server = (t_server - t_runtime) / 1e3;
    s->register_arrival = (arrival - t_server) / 1e3;
    s->register_done = (t_registered - t_server) / 1e3;
    return 0;
}

static void print_row(const char *name, double *values, int n, const char *unit)
{
    qsort(values, (size_t)n, sizeof *values, compare_double);
    printf("%-40s %10.2f %10.2f %10.2f  %s\n", name, values[0], values[n / 2], values[n - 1], unit);
}

static int launcher_main(char *self, int rounds)
{
    char dir[] = "/tmp/gp-startup-XXXXXX", kubelet_socket[128], err[256];
    struct kubelet k = {0};
    struct rpc_test_kubelet *kubelet = NULL;
    struct sample *samples = calloc((size_t)rounds, sizeof *samples);
    double *column = calloc((size_t)rounds, sizeof *column);
    int rc = 1, done = 0;

    if (samples == NULL || column == NULL || mkdtemp(dir) == NULL)
        goto out;
    pthread_mutex_init(&k.lock, NULL);
    pthread_cond_init(&k.registered, NULL);
    snprintf(kubelet_socket, sizeof kubelet_socket, "%s/kubelet.sock", dir);
    snprintf(k.plugin_socket, sizeof k.plugin_socket, "%s/gpupool-nvidia-gpu.sock", dir);
    if (rpc_runtime_start(&k.rt, err, sizeof err) != 0 ||
        rpc_test_kubelet_start(kubelet_socket, kubelet_register, &k, &kubelet, err, sizeof err) !=
            0) {
        fprintf(stderr, "kubelet: %s\n", err);
        goto out;
    }
    for (int i = 0; i < rounds; i++)
        if (one_round(&k, self, kubelet_socket, &samples[done]) == 0)
            done++;
    if (done == 0)
        goto out;

    printf("%d rounds, %d GPUs, transport only (grpc_unsecure %s)\n", done, GPUS,
#ifdef __SANITIZE_ADDRESS__
           "dynamic, ASan"
#else
           "as linked"
#endif
    );
    printf("%-40s %10s %10s %10s\n", "measurement", "min", "median", "max");
#define ROW(field, name, unit)                    \
    do {                                          \
        for (int i = 0; i < done; i++)            \
            column[i] = (double)samples[i].field; \
        print_row(name, column, done, unit);      \
    } while (0)
    ROW(exec_to_register, "exec -> Register at the kubelet", "ms");
    ROW(exec_to_main, "  exec -> main()", "ms");
    ROW(runtime, "  grpc_init + cq thread", "ms");
    ROW(server, "  server start (probe, bind, listen)", "ms");
    ROW(register_arrival, "  channel connect + Register arrives", "ms");
    ROW(register_done, "Register returned (incl. kubelet callback)", "ms");
    ROW(rss_kb, "VmRSS after registration", "KiB");
    ROW(hwm_kb, "VmHWM after registration", "KiB");
    ROW(anon_kb, "  of which anonymous (RssAnon)", "KiB");
    ROW(file_kb, "  of which file-backed (RssFile)", "KiB");
    ROW(threads, "threads after registration", "");
    rc = 0;
out:
    rpc_test_kubelet_stop(kubelet);
    if (k.rt != NULL)
        rpc_runtime_stop(k.rt);
    if (dir[strlen(dir) - 1] != 'X')
        rmdir(dir);
    free(samples);
    free(column);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "plugin") == 0)
        return plugin_main(argv[2], argv[3], atoi(argv[4]));
    int rounds = DEFAULT_ROUNDS;
    if (argc == 3 && strcmp(argv[1], "-n") == 0 && atoi(argv[2]) > 0)
        rounds = atoi(argv[2]);
    else if (argc != 1) {
        fprintf(stderr, "usage: rpc_startup [-n ROUNDS]\n");
        return 2;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    return launcher_main(self, rounds);
}
