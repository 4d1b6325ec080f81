/* test_rpc -- the gRPC transport through real unix sockets: a server and
 * clients in one process, plus a fake kubelet on a second runtime. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rpc.h"
#include "rpc_test_client.h"

#define ALLOCATE "/v1beta1.DevicePlugin/Allocate"
#define OPTIONS "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define REGISTER "/v1beta1.Registration/Register"
#define TIMEOUT_MS 5000

/* ---- a scripted DevicePlugin ------------------------------------------------- */

struct fake_plugin {
    pthread_mutex_t lock;
    pthread_cond_t parked_changed;
    uint64_t generation;
    int unary_calls;
    uint8_t last_request[64];
    size_t last_request_len;
    int snapshot_calls;
    struct rpc_deferred *parked; /* a request "park..." waits here for the test */
};

/* "fail...": NOT_FOUND; "park...": parked for the test to complete;
 * "lie...": claims RPC_DEFERRED without parking; anything else: echoed. */
/* The DevicePlugin's names, as the kubelet calls them; the transport
 * knows none of them (plugin.c has the real table). */
enum fake_method { FAKE_OPTIONS, FAKE_LIST_AND_WATCH, FAKE_ALLOCATE };
static const struct rpc_method FAKE_METHODS[] = {
    [FAKE_OPTIONS] = {OPTIONS, RPC_METHOD_UNARY},
    [FAKE_LIST_AND_WATCH] = {"/v1beta1.DevicePlugin/ListAndWatch", RPC_METHOD_STREAM},
    [FAKE_ALLOCATE] = {ALLOCATE, RPC_METHOD_UNARY},
};

static enum rpc_status fake_unary(void *ctx, struct rpc_call *call, size_t method,
                                  const uint8_t *req, size_t len, struct rpc_buf *resp, char *msg,
                                  size_t msglen)
{
    struct fake_plugin *p = ctx;
    pthread_mutex_lock(&p->lock);
    p->unary_calls++;
    p->last_request_len = len < sizeof p->last_request ? len : sizeof p->last_request;
    memcpy(p->last_request, req, p->last_request_len);
    pthread_mutex_unlock(&p->lock);

    if (len >= 4 && memcmp(req, "park", 4) == 0) {
        struct rpc_deferred *d = rpc_call_defer(call);
        if (d == NULL) {
            snprintf(msg, msglen, "cannot park");
            return RPC_INTERNAL;
        }
        pthread_mutex_lock(&p->lock);
        p->parked = d;
        pthread_cond_broadcast(&p->parked_changed);
        pthread_mutex_unlock(&p->lock);
        return RPC_DEFERRED;
    }
    if (len >= 3 && memcmp(req, "lie", 3) == 0)
        return RPC_DEFERRED;

    if (method == FAKE_ALLOCATE && len >= 4 && memcmp(req, "fail", 4) == 0) {
        snprintf(msg, msglen, "unknown device GPU-x");
        return RPC_NOT_FOUND;
    }
    resp->data = malloc(len + 5);
    if (resp->data == NULL)
        return RPC_RESOURCE_EXHAUSTED;
    memcpy(resp->data, "echo:", 5);
    if (len > 0)
        memcpy(resp->data + 5, req, len);
    resp->len = len + 5;
    return RPC_OK;
}

static int fake_snapshot(void *ctx, struct rpc_buf *out, uint64_t *generation)
{
    struct fake_plugin *p = ctx;
    pthread_mutex_lock(&p->lock);
    p->snapshot_calls++;
    *generation = p->generation;
    out->data = malloc(32);
    if (out->data != NULL)
        out->len =
            (size_t)snprintf((char *)out->data, 32, "gen=%llu", (unsigned long long)p->generation);
    pthread_mutex_unlock(&p->lock);
    return out->data != NULL ? 0 : -1;
}

static void fake_bump(struct fake_plugin *p)
{
    pthread_mutex_lock(&p->lock);
    p->generation++;
    pthread_mutex_unlock(&p->lock);
}

/* ---- fixture: one runtime, a temp dir, one server per test --------------------- */

struct fixture {
    struct rpc_runtime *rt;
    char dir[64];
    char path[128];
    struct fake_plugin plugin;
    struct rpc_server *srv;
};

static struct rpc_runtime *shared_rt;

static int group_setup(void **state)
{
    char err[256];
    (void)state;
    if (rpc_runtime_start(&shared_rt, err, sizeof err) != 0) {
        fprintf(stderr, "rpc_runtime_start: %s\n", err);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rpc_runtime_stop(shared_rt);
    return 0;
}

static struct rpc_handlers fake_handlers(struct fake_plugin *p)
{
    struct rpc_handlers h = {.ctx = p,
                             .methods = FAKE_METHODS,
                             .method_count = sizeof FAKE_METHODS / sizeof FAKE_METHODS[0],
                             .unary = fake_unary,
                             .snapshot = fake_snapshot};
    return h;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    char err[256];
    if (f == NULL)
        return -1;
    f->rt = shared_rt;
    snprintf(f->dir, sizeof f->dir, "/tmp/gp-rpc-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->path, sizeof f->path, "%s/plugin.sock", f->dir);
    pthread_mutex_init(&f->plugin.lock, NULL);
    pthread_cond_init(&f->plugin.parked_changed, NULL);
    f->plugin.generation = 1;
    struct rpc_handlers h = fake_handlers(&f->plugin);
    if (rpc_server_start(f->rt, f->path, &h, &f->srv, err, sizeof err) != 0) {
        fprintf(stderr, "rpc_server_start: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    rpc_server_stop(f->srv);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", f->dir);
    pthread_mutex_destroy(&f->plugin.lock);
    pthread_cond_destroy(&f->plugin.parked_changed);
    free(f);
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One unary call; returns the status, response copied into out (NUL-ended). */
static int call(struct fixture *f, const char *method, const void *req, size_t len, char *out,
                size_t outlen, char *msg, size_t msglen)
{
    struct rpc_buf resp = {0};
    int status = -1;
    int rc =
        rpc_test_call(f->rt, f->path, method, req, len, TIMEOUT_MS, &resp, &status, msg, msglen);
    if (rc == 0) {
        assert_int_equal(status, RPC_OK);
        size_t n = resp.len < outlen - 1 ? resp.len : outlen - 1;
        memcpy(out, resp.data, n);
        out[n] = '\0';
        free(resp.data);
    } else {
        assert_null(resp.data);
        assert_int_not_equal(status, RPC_OK);
    }
    return status;
}

/* ---- unary ----------------------------------------------------------------------- */

static void test_unary_round_trip(void **state)
{
    struct fixture *f = *state;
    char out[64], msg[256];
    assert_int_equal(call(f, ALLOCATE, "hello", 5, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_string_equal(out, "echo:hello");

    /* An empty message (Empty encodes as 0 bytes) is a valid request. */
    assert_int_equal(call(f, OPTIONS, "", 0, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_string_equal(out, "echo:");

    /* A persistent client: many calls on one channel. */
    struct rpc_client *client = NULL;
    assert_int_equal(rpc_client_open(f->rt, f->path, &client, msg, sizeof msg), 0);
    for (int i = 0; i < 50; i++) {
        struct rpc_buf resp = {0};
        int status = -1;
        assert_int_equal(rpc_test_client_call(client, ALLOCATE, (const uint8_t *)"x", 1, TIMEOUT_MS,
                                              &resp, &status, msg, sizeof msg),
                         0);
        assert_int_equal(status, RPC_OK);
        assert_int_equal(resp.len, 6);
        assert_memory_equal(resp.data, "echo:x", 6);
        free(resp.data);
    }
    rpc_client_close(client);
    assert_int_equal(f->plugin.unary_calls, 52);
}

static void test_handler_error_reaches_client(void **state)
{
    struct fixture *f = *state;
    char out[64], msg[256];
    assert_int_equal(call(f, ALLOCATE, "fail", 4, out, sizeof out, msg, sizeof msg), RPC_NOT_FOUND);
    assert_string_equal(msg, "unknown device GPU-x");
}

static void test_unknown_method(void **state)
{
    struct fixture *f = *state;
    char out[64], msg[256];
    assert_int_equal(call(f, "/v1beta1.DevicePlugin/Nope", "", 0, out, sizeof out, msg, sizeof msg),
                     RPC_UNIMPLEMENTED);
    assert_non_null(strstr(msg, "/v1beta1.DevicePlugin/Nope"));
    /* Register is not served by a plugin server. */
    assert_int_equal(
        call(f, "/v1beta1.Registration/Register", "", 0, out, sizeof out, msg, sizeof msg),
        RPC_UNIMPLEMENTED);
    assert_int_equal(f->plugin.unary_calls, 0);
}

static void test_garbage_protobuf_reaches_handler(void **state)
{
    struct fixture *f = *state;
    const uint8_t garbage[] = {0xff, 0x00, 0x13, 0x37, 0x80, 0x80, 0x80};
    char out[64], msg[256];
    assert_int_equal(call(f, ALLOCATE, garbage, sizeof garbage, out, sizeof out, msg, sizeof msg),
                     RPC_OK);
    assert_int_equal(f->plugin.last_request_len, sizeof garbage);
    assert_memory_equal(f->plugin.last_request, garbage, sizeof garbage);
}

static void test_missing_request_is_invalid_argument(void **state)
{
    struct fixture *f = *state;
    char out[64], msg[256];
    assert_int_equal(call(f, ALLOCATE, NULL, RPC_NO_MESSAGE, out, sizeof out, msg, sizeof msg),
                     RPC_INVALID_ARGUMENT);
    assert_int_equal(f->plugin.unary_calls, 0);
}

static void test_oversized_request(void **state)
{
    struct fixture *f = *state;
    size_t big = 5u << 20;
    uint8_t *req = calloc(1, big);
    char out[64], msg[256];
    assert_non_null(req);
    assert_int_equal(call(f, ALLOCATE, req, big, out, sizeof out, msg, sizeof msg),
                     RPC_RESOURCE_EXHAUSTED);
    free(req);
    assert_int_equal(f->plugin.unary_calls, 0);
    /* still serving */
    assert_int_equal(call(f, ALLOCATE, "ok", 2, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_string_equal(out, "echo:ok");
}

/* ---- ListAndWatch ------------------------------------------------------------------ */

static void expect_message(struct rpc_watch *w, const char *want)
{
    struct rpc_buf m = {0};
    char err[256];
    int rc = rpc_test_watch_next(w, TIMEOUT_MS, &m, NULL, err, sizeof err);
    if (rc != 1)
        fail_msg("watch_next: %d %s", rc, err);
    assert_int_equal(m.len, strlen(want));
    assert_memory_equal(m.data, want, m.len);
    free(m.data);
}

static void wait_stream_count(struct rpc_server *srv, int want)
{
    for (int i = 0; i < 500 && rpc_test_stream_count(srv) != want; i++)
        usleep(10000);
    assert_int_equal(rpc_test_stream_count(srv), want);
}

static void test_list_and_watch(void **state)
{
    struct fixture *f = *state;
    struct rpc_client *client = NULL;
    struct rpc_watch *w = NULL;
    char err[256];

    assert_int_equal(rpc_client_open(f->rt, f->path, &client, err, sizeof err), 0);
    assert_int_equal(rpc_test_watch_open(client, &w, err, sizeof err), 0);
    expect_message(w, "gen=1");
    wait_stream_count(f->srv, 1);

    /* A notify without a change sends nothing. */
    rpc_server_notify(f->srv);
    struct rpc_buf m = {0};
    assert_int_equal(rpc_test_watch_next(w, 100, &m, NULL, err, sizeof err), 0);

    double worst = 0;
    for (int i = 2; i <= 20; i++) {
        char want[16];
        snprintf(want, sizeof want, "gen=%d", i);
        fake_bump(&f->plugin);
        double t0 = now_ms();
        rpc_server_notify(f->srv);
        expect_message(w, want);
        double dt = now_ms() - t0;
        worst = dt > worst ? dt : worst;
    }
    fprintf(stderr, "notify -> ListAndWatch message, worst of 19: %.3f ms\n", worst);

    /* Many changes at once coalesce; the newest always arrives last. */
    for (int i = 0; i < 10; i++) {
        fake_bump(&f->plugin);
        rpc_server_notify(f->srv);
    }
    char last[32] = "";
    for (;;) {
        int rc = rpc_test_watch_next(w, 200, &m, NULL, err, sizeof err);
        if (rc != 1)
            break;
        snprintf(last, sizeof last, "%.*s", (int)m.len, (const char *)m.data);
        free(m.data);
    }
    assert_string_equal(last, "gen=30");

    /* Client cancel frees the stream. */
    rpc_test_watch_close(w);
    wait_stream_count(f->srv, 0);
    rpc_client_close(client);
}

static void test_stop_ends_streams_with_ok(void **state)
{
    struct fixture *f = *state;
    struct rpc_client *client = NULL;
    struct rpc_watch *w1 = NULL, *w2 = NULL;
    char err[256];
    assert_int_equal(rpc_client_open(f->rt, f->path, &client, err, sizeof err), 0);
    assert_int_equal(rpc_test_watch_open(client, &w1, err, sizeof err), 0);
    assert_int_equal(rpc_test_watch_open(client, &w2, err, sizeof err), 0);
    expect_message(w1, "gen=1");
    expect_message(w2, "gen=1");
    wait_stream_count(f->srv, 2);

    rpc_server_stop(f->srv);
    f->srv = NULL;

    struct rpc_buf m = {0};
    int status = -1;
    /* OK, not CANCELLED: ended by status, not by the grace-period cancel. */
    assert_int_equal(rpc_test_watch_next(w1, TIMEOUT_MS, &m, &status, err, sizeof err), -1);
    assert_int_equal(status, RPC_OK);
    status = -1;
    assert_int_equal(rpc_test_watch_next(w2, TIMEOUT_MS, &m, &status, err, sizeof err), -1);
    assert_int_equal(status, RPC_OK);
    rpc_test_watch_close(w1);
    rpc_test_watch_close(w2);
    rpc_client_close(client);
}

struct notifier {
    struct fixture *f;
    _Atomic int stop;
    int rounds;
};

static void *notify_loop(void *arg)
{
    struct notifier *n = arg;
    while (!n->stop) {
        fake_bump(&n->f->plugin);
        rpc_server_notify(n->f->srv);
        n->rounds++;
        usleep(200);
    }
    return NULL;
}

/* Notifies from another thread while streams open, receive and cancel. */
static void test_notify_races_with_cancel(void **state)
{
    struct fixture *f = *state;
    struct notifier n = {.f = f};
    struct rpc_client *client = NULL;
    char err[256];
    pthread_t thread;
    assert_int_equal(rpc_client_open(f->rt, f->path, &client, err, sizeof err), 0);
    assert_int_equal(pthread_create(&thread, NULL, notify_loop, &n), 0);
    for (int i = 0; i < 30; i++) {
        struct rpc_watch *w[3] = {NULL};
        for (int j = 0; j < 3; j++)
            assert_int_equal(rpc_test_watch_open(client, &w[j], err, sizeof err), 0);
        for (int j = 0; j < 3; j++) {
            struct rpc_buf m = {0};
            assert_int_equal(rpc_test_watch_next(w[j], TIMEOUT_MS, &m, NULL, err, sizeof err), 1);
            assert_memory_equal(m.data, "gen=", 4);
            free(m.data);
        }
        for (int j = 0; j < 3; j++)
            rpc_test_watch_close(w[j]);
    }
    n.stop = 1;
    pthread_join(thread, NULL);
    assert_true(n.rounds > 0);
    wait_stream_count(f->srv, 0);
    rpc_client_close(client);
}

/* ---- socket safety ------------------------------------------------------------------ */

static void test_live_socket_refused(void **state)
{
    struct fixture *f = *state;
    struct fake_plugin other = {.generation = 1};
    struct rpc_handlers h = fake_handlers(&other);
    struct rpc_server *second = NULL;
    char err[256], out[64], msg[256];
    pthread_mutex_init(&other.lock, NULL);

    assert_int_equal(rpc_server_start(f->rt, f->path, &h, &second, err, sizeof err), -1);
    assert_null(second);
    assert_non_null(strstr(err, "is served by another live process"));
    /* The first server still owns and serves the socket. */
    assert_int_equal(call(f, ALLOCATE, "a", 1, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_int_equal(f->plugin.unary_calls, 1);
    assert_int_equal(other.unary_calls, 0);
    pthread_mutex_destroy(&other.lock);
}

/* Leave a socket file nobody listens on, as a SIGKILLed server does. */
static void make_stale_socket(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    close(fd);
}

static void test_stale_socket_replaced(void **state)
{
    struct fixture *f = *state;
    char path[160], err[256];
    snprintf(path, sizeof path, "%s/stale.sock", f->dir);
    make_stale_socket(path);
    struct rpc_handlers h = fake_handlers(&f->plugin);
    struct rpc_server *srv = NULL;
    assert_int_equal(rpc_server_start(f->rt, path, &h, &srv, err, sizeof err), 0);
    struct rpc_buf resp = {0};
    int status = -1;
    assert_int_equal(rpc_test_call(f->rt, path, ALLOCATE, (const uint8_t *)"s", 1, TIMEOUT_MS,
                                   &resp, &status, err, sizeof err),
                     0);
    free(resp.data);
    rpc_server_stop(srv);
}

static void test_non_socket_refused(void **state)
{
    struct fixture *f = *state;
    char path[160], err[256];
    snprintf(path, sizeof path, "%s/file.sock", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    struct rpc_handlers h = fake_handlers(&f->plugin);
    struct rpc_server *srv = NULL;
    assert_int_equal(rpc_server_start(f->rt, path, &h, &srv, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a socket"));
    assert_int_equal(access(path, F_OK), 0);
}

static void test_stop_removes_only_our_socket(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(access(f->path, F_OK), 0);
    rpc_server_stop(f->srv);
    f->srv = NULL;
    assert_int_equal(access(f->path, F_OK), -1);
    assert_int_equal(errno, ENOENT);

    /* A socket file replaced behind our back is left alone. */
    char path[160], err[256];
    snprintf(path, sizeof path, "%s/replaced.sock", f->dir);
    struct rpc_handlers h = fake_handlers(&f->plugin);
    struct rpc_server *srv = NULL;
    assert_int_equal(rpc_server_start(f->rt, path, &h, &srv, err, sizeof err), 0);
    assert_int_equal(unlink(path), 0);
    make_stale_socket(path);
    rpc_server_stop(srv);
    assert_int_equal(access(path, F_OK), 0);
}

/* ---- raw garbage on the socket ------------------------------------------------------------- */

static void send_raw(const char *path, const void *data, size_t len)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    /* The server may close early; a short write or EPIPE is fine. */
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    (void)n;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[512];
    n = recv(fd, buf, sizeof buf, 0);
    (void)n;
    close(fd);
}

static void test_raw_garbage_keeps_serving(void **state)
{
    struct fixture *f = *state;
    size_t len = 64 * 1024;
    uint8_t *noise = malloc(len);
    uint32_t x = 2463534242u;
    assert_non_null(noise);
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise[i] = (uint8_t)x;
    }
    send_raw(f->path, noise, len);
    free(noise);
    const char http[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    send_raw(f->path, http, sizeof http - 1);
    const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\xff\xff\xff\xff";
    send_raw(f->path, preface, sizeof preface - 1);

    char out[64], msg[256];
    assert_int_equal(call(f, ALLOCATE, "alive", 5, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_string_equal(out, "echo:alive");
}

/* ---- deferred replies ------------------------------------------------------------- */

/* A client call on a thread of its own, so the test can act while it waits. */
struct async_call {
    struct fixture *f;
    const char *request;
    int timeout_ms;
    pthread_t thread;
    atomic_int done;
    int rc, status;
    char reply[64], msg[256];
};

static void *async_call_main(void *arg)
{
    struct async_call *a = arg;
    struct rpc_buf resp = {0};
    a->rc =
        rpc_test_call(a->f->rt, a->f->path, ALLOCATE, (const uint8_t *)a->request,
                      strlen(a->request), a->timeout_ms, &resp, &a->status, a->msg, sizeof a->msg);
    snprintf(a->reply, sizeof a->reply, "%.*s", (int)resp.len,
             resp.data != NULL ? (const char *)resp.data : "");
    free(resp.data);
    atomic_store(&a->done, 1);
    return NULL;
}

static void async_call_start(struct async_call *a, struct fixture *f, const char *request,
                             int timeout_ms)
{
    memset(a, 0, sizeof *a);
    a->f = f;
    a->request = request;
    a->timeout_ms = timeout_ms;
    a->status = -1;
    assert_int_equal(pthread_create(&a->thread, NULL, async_call_main, a), 0);
}

/* Waits until the plugin parked a call; takes its handle. */
static struct rpc_deferred *take_parked(struct fake_plugin *p)
{
    pthread_mutex_lock(&p->lock);
    while (p->parked == NULL)
        pthread_cond_wait(&p->parked_changed, &p->lock);
    struct rpc_deferred *d = p->parked;
    p->parked = NULL;
    pthread_mutex_unlock(&p->lock);
    return d;
}

static struct rpc_buf reply_of(const char *text)
{
    struct rpc_buf b = {(uint8_t *)strdup(text), strlen(text)};
    assert_non_null(b.data);
    return b;
}

/* The first Allocate is parked; the second is answered meanwhile; the first
 * is answered later, from this (another) thread. */
static void test_deferred_does_not_block_other_calls(void **state)
{
    struct fixture *f = *state;
    struct async_call first;
    char out[64], msg[256];
    async_call_start(&first, f, "park-1", TIMEOUT_MS);
    struct rpc_deferred *d = take_parked(&f->plugin);

    assert_int_equal(call(f, ALLOCATE, "second", 6, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_string_equal(out, "echo:second");
    assert_int_equal(atomic_load(&first.done), 0); /* still parked: nobody answered it */

    struct rpc_buf late = reply_of("late:park-1");
    rpc_call_complete(d, RPC_OK, &late, NULL);
    pthread_join(first.thread, NULL);
    assert_int_equal(first.rc, 0);
    assert_int_equal(first.status, RPC_OK);
    assert_string_equal(first.reply, "late:park-1");
}

/* Health pushes go out while a call is parked; an error completes it. */
static void test_list_and_watch_while_parked(void **state)
{
    struct fixture *f = *state;
    struct rpc_client *client = NULL;
    struct rpc_watch *w = NULL;
    struct async_call parked;
    char err[256];
    assert_int_equal(rpc_client_open(f->rt, f->path, &client, err, sizeof err), 0);
    assert_int_equal(rpc_test_watch_open(client, &w, err, sizeof err), 0);
    expect_message(w, "gen=1");

    async_call_start(&parked, f, "park-2", TIMEOUT_MS);
    struct rpc_deferred *d = take_parked(&f->plugin);
    fake_bump(&f->plugin);
    rpc_server_notify(f->srv);
    expect_message(w, "gen=2");
    assert_int_equal(atomic_load(&parked.done), 0);

    rpc_call_complete(d, RPC_FAILED_PRECONDITION, NULL, "GPU-x is lost");
    pthread_join(parked.thread, NULL);
    assert_int_equal(parked.rc, -1);
    assert_int_equal(parked.status, RPC_FAILED_PRECONDITION);
    assert_string_equal(parked.msg, "GPU-x is lost");
    rpc_test_watch_close(w);
    rpc_client_close(client);
}

/* Stopping the server answers a parked call UNAVAILABLE at once; completing
 * it afterwards (even after the runtime is gone) only frees the handle. */
static void test_stop_with_parked_call(void **state)
{
    struct fixture *f = *state;
    struct async_call parked;
    char err[256];
    async_call_start(&parked, f, "park-3", TIMEOUT_MS);
    struct rpc_deferred *d = take_parked(&f->plugin);

    rpc_server_stop(f->srv);
    f->srv = NULL;
    pthread_join(parked.thread, NULL);
    assert_int_equal(parked.rc, -1);
    assert_int_equal(parked.status, RPC_UNAVAILABLE);
    assert_non_null(strstr(parked.msg, "stopping"));
    struct rpc_buf late = reply_of("too late");
    rpc_call_complete(d, RPC_OK, &late, NULL);

    /* The same with the whole runtime stopped before the worker answers. */
    struct rpc_runtime *rt = NULL;
    struct rpc_handlers h = fake_handlers(&f->plugin);
    assert_int_equal(rpc_runtime_start(&rt, err, sizeof err), 0);
    assert_int_equal(rpc_server_start(rt, f->path, &h, &f->srv, err, sizeof err), 0);
    async_call_start(&parked, f, "park-4", TIMEOUT_MS);
    d = take_parked(&f->plugin);
    rpc_runtime_stop(rt); /* stops f->srv too */
    f->srv = NULL;
    pthread_join(parked.thread, NULL);
    assert_int_equal(parked.status, RPC_UNAVAILABLE);
    late = reply_of("later still");
    rpc_call_complete(d, RPC_OK, &late, NULL);
}

/* The client gives up while its call is parked: whichever of the close and
 * the completion comes first, the handle is freed once and the server
 * goes on serving. */
static void test_parked_call_client_gives_up(void **state)
{
    struct fixture *f = *state;
    struct async_call parked;
    char out[64], msg[256];
    async_call_start(&parked, f, "park-5", 200);
    struct rpc_deferred *d = take_parked(&f->plugin);
    pthread_join(parked.thread, NULL);
    assert_int_equal(parked.status, RPC_DEADLINE_EXCEEDED);
    struct rpc_buf late = reply_of("nobody listens");
    rpc_call_complete(d, RPC_OK, &late, NULL);
    assert_int_equal(call(f, ALLOCATE, "after", 5, out, sizeof out, msg, sizeof msg), RPC_OK);
    assert_string_equal(out, "echo:after");
}

/* RPC_DEFERRED without a parked call is a handler bug, answered INTERNAL. */
static void test_deferred_without_parking(void **state)
{
    struct fixture *f = *state;
    char out[64], msg[256];
    assert_int_equal(call(f, ALLOCATE, "lie", 3, out, sizeof out, msg, sizeof msg), RPC_INTERNAL);
    assert_int_equal(call(f, ALLOCATE, "ok", 2, out, sizeof out, msg, sizeof msg), RPC_OK);
}

/* ---- Register against a fake kubelet --------------------------------------------------- */

struct fake_kubelet {
    struct rpc_runtime *rt;    /* for the callback's client */
    const char *plugin_socket; /* called back inside Register, like the kubelet */
    enum rpc_status answer;
    int registrations;
    int callback_status;
    char callback_reply[64];
    uint8_t request[64];
    size_t request_len;
};

static enum rpc_status kubelet_register(void *ctx, const uint8_t *req, size_t len, char *msg,
                                        size_t msglen)
{
    struct fake_kubelet *k = ctx;
    k->registrations++;
    k->request_len = len < sizeof k->request ? len : sizeof k->request;
    memcpy(k->request, req, k->request_len);
    if (k->answer != RPC_OK) {
        snprintf(msg, msglen, "bad version");
        return k->answer;
    }
    struct rpc_buf resp = {0};
    char err[256];
    k->callback_status = -1;
    if (rpc_test_call(k->rt, k->plugin_socket, OPTIONS, (const uint8_t *)"", 0, 3000, &resp,
                      &k->callback_status, err, sizeof err) == 0) {
        snprintf(k->callback_reply, sizeof k->callback_reply, "%.*s", (int)resp.len,
                 (const char *)resp.data);
        free(resp.data);
    }
    return RPC_OK;
}

static struct rpc_test_kubelet *kubelet_start(struct fake_kubelet *k, const char *path)
{
    struct rpc_test_kubelet *kubelet = NULL;
    char err[256];
    if (rpc_test_kubelet_start(path, kubelet_register, k, &kubelet, err, sizeof err) != 0)
        fail_msg("kubelet server: %s", err);
    return kubelet;
}

static void test_register_with_callback(void **state)
{
    struct fixture *f = *state;
    struct fake_kubelet k = {.rt = f->rt, .plugin_socket = f->path, .answer = RPC_OK};
    char kubelet_path[160], err[256];
    snprintf(kubelet_path, sizeof kubelet_path, "%s/kubelet.sock", f->dir);
    struct rpc_test_kubelet *kubelet = kubelet_start(&k, kubelet_path);

    const uint8_t req[] = {0x0a, 0x07, 'v', '1', 'b', 'e', 't', 'a', '1'};
    int rc = rpc_test_register(f->rt, kubelet_path, req, sizeof req, TIMEOUT_MS, err, sizeof err);
    if (rc != 0)
        fail_msg("rpc_test_register: %s", err);
    assert_int_equal(k.registrations, 1);
    assert_int_equal(k.request_len, sizeof req);
    assert_memory_equal(k.request, req, sizeof req);
    /* The kubelet's GetDevicePluginOptions, made while Register was in flight. */
    assert_int_equal(k.callback_status, RPC_OK);
    assert_string_equal(k.callback_reply, "echo:");

    /* A refusal carries status and message. */
    k.answer = RPC_INVALID_ARGUMENT;
    assert_int_equal(
        rpc_test_register(f->rt, kubelet_path, req, sizeof req, TIMEOUT_MS, err, sizeof err), -1);
    assert_non_null(strstr(err, "INVALID_ARGUMENT"));
    assert_non_null(strstr(err, "bad version"));

    /* The production client, without wait-for-ready, as the daemon calls it. */
    struct rpc_client *client = NULL;
    k.answer = RPC_OK;
    assert_int_equal(rpc_client_open(f->rt, kubelet_path, &client, err, sizeof err), 0);
    rpc_client_connect(client);
    assert_int_equal(
        rpc_client_call(client, REGISTER, req, sizeof req, TIMEOUT_MS, true, NULL, err, sizeof err),
        0);
    assert_int_equal(k.registrations, 3);
    rpc_client_close(client);
    rpc_test_kubelet_stop(kubelet);
}

struct late_kubelet {
    struct fake_kubelet *k;
    const char *path;
    struct rpc_test_kubelet *kubelet;
};

static void *start_kubelet_later(void *arg)
{
    struct late_kubelet *late = arg;
    usleep(300 * 1000);
    late->kubelet = kubelet_start(late->k, late->path);
    return NULL;
}

static void test_register_waits_for_kubelet(void **state)
{
    struct fixture *f = *state;
    struct fake_kubelet k = {.rt = f->rt, .plugin_socket = f->path, .answer = RPC_OK};
    char kubelet_path[160], err[256];
    snprintf(kubelet_path, sizeof kubelet_path, "%s/kubelet.sock", f->dir);

    /* Nobody there: the deadline ends the wait. */
    assert_int_equal(
        rpc_test_register(f->rt, kubelet_path, (const uint8_t *)"", 0, 200, err, sizeof err), -1);
    assert_non_null(strstr(err, "DEADLINE_EXCEEDED"));

    /* Without wait-for-ready the daemon's client fails at once instead. */
    struct rpc_client *client = NULL;
    assert_int_equal(rpc_client_open(f->rt, kubelet_path, &client, err, sizeof err), 0);
    assert_int_equal(rpc_client_call(client, REGISTER, (const uint8_t *)"", 0, TIMEOUT_MS, false,
                                     NULL, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "UNAVAILABLE"));
    assert_non_null(strstr(err, "Register failed: "));
    rpc_client_close(client);

    /* The socket appears while we wait: wait-for-ready picks it up. */
    struct late_kubelet late = {.k = &k, .path = kubelet_path};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, start_kubelet_later, &late), 0);
    int rc =
        rpc_test_register(f->rt, kubelet_path, (const uint8_t *)"", 0, TIMEOUT_MS, err, sizeof err);
    pthread_join(thread, NULL);
    if (rc != 0)
        fail_msg("rpc_test_register: %s", err);
    assert_int_equal(k.registrations, 1);
    rpc_test_kubelet_stop(late.kubelet);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unary_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handler_error_reaches_client, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_method, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_protobuf_reaches_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_request_is_invalid_argument, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_and_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_ends_streams_with_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_notify_races_with_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_live_socket_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_socket_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_socket_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_removes_only_our_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_garbage_keeps_serving, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_does_not_block_other_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_and_watch_while_parked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_with_parked_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parked_call_client_gives_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_without_parking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_with_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_register_waits_for_kubelet, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
