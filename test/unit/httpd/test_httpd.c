/* Unit tests: the shared HTTP server (httpd.h) over loopback -- routing by
 * method and path, the query, an echoed body, 413 on an oversized body
 * (announced or not), a taken and a static body, stop; a header, the
 * request deadline (both threading models), the per-address limit, a full
 * table that sheds an idle connection (both models) but refuses one more
 * when every connection is busy, 503
 * past the held-bodies bound, client CA without TLS. Needs
 * libmicrohttpd.so.12 installed (it is a build dependency). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "httpd.h"

static void handle(void *ctx, const struct httpd_request *req, struct httpd_response *resp)
{
    int *calls = ctx;
    (*calls)++;
    if (strcmp(req->path, "/static") == 0) {
        resp->status = 200;
        resp->content_type = "text/plain";
        resp->body = (char *)"fixed";
        resp->len = 5;
        resp->body_static = true;
    } else if (strcmp(req->path, "/echo") == 0 && strcmp(req->method, "POST") == 0) {
        const char *q = httpd_query(req, "x");
        resp->status = 201;
        resp->body = malloc(req->len + 64);
        resp->len = (size_t)sprintf(resp->body, "%s %s x=%s", req->method, req->body, q ? q : "-");
    } else if (strcmp(req->path, "/slow") == 0) {
        usleep(1000 * 1000); /* keeps its connection busy */
        resp->status = 200;
    } else if (strcmp(req->path, "/header") == 0) {
        const char *h = httpd_header(req, "x-test");
        resp->status = 200;
        resp->body = strdup(h ? h : "-");
        resp->len = strlen(resp->body);
    } else {
        resp->status = 404;
    }
}

/* A connection to 127.0.0.1:port from the loopback address source. */
static int connect_from(const char *source, unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, source, &from.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof from), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Whether the server ends the connection (EOF or reset) within ms. */
static bool closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return false;
    char c;
    return read(fd, &c, 1) <= 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One request on a fresh connection; the raw response (malloc'ed). */
static char *exchange(unsigned port, const char *request)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    size_t n = strlen(request);
    assert_int_equal(write(fd, request, n), (ssize_t)n);
    size_t cap = 65536, len = 0;
    char *out = calloc(1, cap);
    ssize_t r;
    while (len + 1 < cap && (r = read(fd, out + len, cap - len - 1)) > 0)
        len += (size_t)r;
    close(fd);
    return out;
}

static void expect(char *raw, const char *status_line, const char *body)
{
    assert_non_null(strstr(raw, status_line));
    if (body) {
        const char *end = strstr(raw, "\r\n\r\n");
        assert_non_null(end);
        assert_string_equal(end + 4, body);
    }
    free(raw);
}

static void test_httpd_serves_and_stops(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {.host = "127.0.0.1",
                                      .port = 0,
                                      .what = "test address",
                                      .max_body = 16,
                                      .thread_per_connection = true};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
    unsigned port = httpd_port(server);
    assert_true(port > 0);
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%u", port);
    assert_string_equal(httpd_bound_address(server), want);

    expect(exchange(port, "GET /static HTTP/1.0\r\n\r\n"), " 200 ", "fixed");
    expect(exchange(port, "GET /nowhere HTTP/1.0\r\n\r\n"), " 404 ", "");
    expect(exchange(port, "POST /echo?x=1 HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello"), " 201 ",
           "POST hello x=1");
    assert_int_equal(calls, 3);
    /* Announced too large: refused from the headers, the handler not called. */
    expect(exchange(port, "POST /echo HTTP/1.0\r\nContent-Length: 17\r\n\r\n0123456789abcdefg"),
           " 413 ", "{\"Error\":\"request body too large\"}");
    /* Chunked, so unannounced: refused once the cap is passed. */
    expect(exchange(port, "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n11\r\n0123456789abcdefg\r\n0\r\n\r\n"),
           " 413 ", NULL);
    assert_int_equal(calls, 3);

    /* The same port again: a clear error naming the listener. */
    const struct httpd_options again = {.host = "127.0.0.1", .port = port, .what = "test address"};
    struct httpd *second = NULL;
    assert_int_equal(httpd_start(&again, handle, &calls, &second, err, sizeof err), -1);
    assert_null(second);
    assert_non_null(strstr(err, "cannot listen on test address"));

    httpd_stop(server);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_not_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0); /* closed */
    close(fd);
    httpd_stop(NULL);
}

static void test_httpd_bad_host(void **state)
{
    (void)state;
    const struct httpd_options opt = {.host = "no such host.invalid", .port = 0, .what = "x"};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, NULL, &server, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid x \"no such host.invalid:0\""));
}

/* The extender's --address takes numeric addresses only. */
static void test_httpd_host_is_numeric(void **state)
{
    (void)state;
    assert_true(httpd_host_is_numeric("127.0.0.1"));
    assert_true(httpd_host_is_numeric("::1"));
    assert_true(httpd_host_is_numeric("[::1]"));
    assert_false(httpd_host_is_numeric("localhost"));
    assert_false(httpd_host_is_numeric("[127.0.0.1"));
    assert_false(httpd_host_is_numeric(""));
}

static void test_httpd_one_polling_thread_drops_bodies(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {.host = "",
                                      .port = 0,
                                      .max_connections = 2,
                                      .listen_backlog = 16,
                                      .thread_stack_bytes = 512 * 1024};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
    assert_non_null(strstr(httpd_bound_address(server), "0.0.0.0:"));
    /* max_body 0: the body is read and dropped, never a 413. */
    expect(exchange(httpd_port(server), "POST /echo HTTP/1.0\r\nContent-Length: 40\r\n\r\n"
                                        "0123456789012345678901234567890123456789"),
           " 201 ", "POST  x=-");
    assert_int_equal(calls, 1);
    httpd_stop(server);
}

static void test_httpd_header(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {.host = "127.0.0.1", .thread_per_connection = true};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
    expect(exchange(httpd_port(server), "GET /header HTTP/1.0\r\nX-Test: yes\r\n\r\n"), " 200 ",
           "yes");
    expect(exchange(httpd_port(server), "GET /header HTTP/1.0\r\n\r\n"), " 200 ", "-");
    httpd_stop(server);
}

/* A header line every 300 ms resets the 30 s idle timeout, never the 2 s
 * deadline; a connection that completes its request in time is served. */
static void test_httpd_request_deadline(void **state)
{
    (void)state;
    for (int threads = 0; threads < 2; threads++) {
        int calls = 0;
        const struct httpd_options opt = {.host = "127.0.0.1",
                                          .thread_per_connection = threads,
                                          .idle_timeout_s = 30,
                                          .request_deadline_s = 2};
        struct httpd *server = NULL;
        char err[256];
        assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
        int fd = connect_from("127.0.0.1", httpd_port(server));
        const char *line = "GET /static HTTP/1.1\r\n";
        assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
        double start = now_s();
        bool closed = false;
        while (!closed && now_s() - start < 6) {
            closed = closed_within(fd, 300);
            if (!closed && write(fd, "X-Slow: y\r\n", 11) != 11)
                closed = true;
        }
        double took = now_s() - start;
        close(fd);
        assert_true(closed);
        assert_true(took > 1.5 && took < 4.5);
        assert_int_equal(calls, 0);
        expect(exchange(httpd_port(server), "GET /static HTTP/1.0\r\n\r\n"), " 200 ", "fixed");
        httpd_stop(server);
    }
}

static void test_httpd_per_ip_limit(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {
        .host = "127.0.0.1", .thread_per_connection = true, .per_ip_limit = 2};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
    unsigned port = httpd_port(server);
    int a = connect_from("127.0.0.1", port), b = connect_from("127.0.0.1", port);
    int c = connect_from("127.0.0.1", port); /* the third from one address: closed at once */
    assert_true(closed_within(c, 2000));
    close(c);
    int d = connect_from("127.0.0.2", port); /* another address is served */
    const char *req = "GET /static HTTP/1.0\r\n\r\n";
    assert_int_equal(write(d, req, strlen(req)), (ssize_t)strlen(req));
    char buf[512] = "";
    struct pollfd p = {.fd = d, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 2000), 1);
    assert_true(read(d, buf, sizeof buf - 1) > 0);
    assert_non_null(strstr(buf, " 200 "));
    close(d);
    close(a);
    close(b);
    httpd_stop(server);
}

/* One GET of /static from source on a fresh connection: whether a 200 came
 * back within ms. */
static bool static_200_from(const char *source, unsigned port, int ms)
{
    int fd = connect_from(source, port);
    const char *req = "GET /static HTTP/1.0\r\n\r\n";
    bool ok = false;
    if (write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
        char buf[512] = "";
        size_t len = 0;
        double end = now_s() + ms / 1000.0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (len + 1 < sizeof buf && now_s() < end &&
               poll(&p, 1, (int)((end - now_s()) * 1000) + 1) == 1) {
            ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
            if (r <= 0)
                break;
            len += (size_t)r;
        }
        ok = strstr(buf, " 200 ") != NULL && strstr(buf, "fixed") != NULL;
    }
    close(fd);
    return ok;
}

/* A full table sheds an idle connection of the address that holds the
 * most, the one waiting longest, instead of refusing the newcomer (review
 * N3/N4); in both threading models. */
static void test_httpd_full_table_sheds_idle(void **state)
{
    (void)state;
    for (int threads = 0; threads < 2; threads++) {
        int calls = 0;
        const struct httpd_options opt = {.host = "127.0.0.1",
                                          .thread_per_connection = threads,
                                          .max_connections = 4,
                                          .idle_timeout_s = 30,
                                          .request_deadline_s = 30};
        struct httpd *server = NULL;
        char err[256];
        assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
        unsigned port = httpd_port(server);
        int lone = connect_from("127.0.0.3", port); /* the oldest, but alone on its address */
        usleep(50 * 1000);
        int idle[4];
        for (int i = 0; i < 3; i++) {
            idle[i] = connect_from("127.0.0.2", port);
            usleep(50 * 1000); /* accepted in this order */
        }
        for (int round = 0; round < 2; round++) {
            double start = now_s();
            assert_true(static_200_from("127.0.0.1", port, 2000));
            assert_true(now_s() - start < 1.0);
            /* 127.0.0.2's oldest went, then its next; 127.0.0.3's stayed. */
            assert_true(closed_within(idle[round], 1000));
            assert_false(closed_within(idle[round + 1], 0));
            assert_false(closed_within(lone, 0));
            if (round == 0) { /* full again once the answered one is gone */
                usleep(100 * 1000);
                idle[3] = connect_from("127.0.0.2", port);
                usleep(50 * 1000);
            }
        }
        assert_int_equal(calls, 2);
        for (int i = 0; i < 4; i++)
            close(idle[i]);
        close(lone);
        httpd_stop(server);
    }
}

/* With every connection busy in its handler, a newcomer is refused (its
 * connection closed unanswered); the busy ones are answered. */
static void test_httpd_full_of_busy_refuses(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {.host = "127.0.0.1",
                                      .thread_per_connection = true,
                                      .max_connections = 2,
                                      .idle_timeout_s = 30,
                                      .request_deadline_s = 30};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
    unsigned port = httpd_port(server);
    const char *req = "GET /slow HTTP/1.0\r\n\r\n";
    int busy[2];
    for (int i = 0; i < 2; i++) {
        busy[i] = connect_from("127.0.0.2", port);
        assert_int_equal(write(busy[i], req, strlen(req)), (ssize_t)strlen(req));
    }
    usleep(300 * 1000); /* both in the handler */
    int late = connect_from("127.0.0.1", port);
    assert_true(closed_within(late, 500));
    close(late);
    for (int i = 0; i < 2; i++) {
        char buf[256] = "";
        struct pollfd p = {.fd = busy[i], .events = POLLIN};
        assert_int_equal(poll(&p, 1, 3000), 1);
        assert_true(read(busy[i], buf, sizeof buf - 1) > 0);
        assert_non_null(strstr(buf, " 200 "));
        close(busy[i]);
    }
    httpd_stop(server);
}

static void test_httpd_held_bodies_bound(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {.host = "127.0.0.1",
                                      .thread_per_connection = true,
                                      .max_body = 1000,
                                      .max_body_total = 1500};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), 0);
    int held = connect_from("127.0.0.1", httpd_port(server));
    char req[1200];
    int n = snprintf(req, sizeof req, "POST /echo HTTP/1.1\r\nContent-Length: 1000\r\n\r\n");
    memset(req + n, 'a', 900);
    assert_int_equal(write(held, req, (size_t)n + 900), n + 900);
    usleep(200 * 1000); /* the server has buffered those 900 bytes */
    char body[800];
    memset(body, 'b', 700);
    snprintf(req, sizeof req, "POST /echo HTTP/1.0\r\nContent-Length: 700\r\n\r\n%.700s", body);
    char *raw = exchange(httpd_port(server), req);
    assert_non_null(strstr(raw, " 503 "));
    assert_non_null(strstr(raw, "server busy"));
    free(raw);
    close(held);
    usleep(200 * 1000);
    expect(exchange(httpd_port(server), req), " 201 ", NULL);
    httpd_stop(server);
}

static void test_httpd_client_ca_needs_tls(void **state)
{
    (void)state;
    int calls = 0;
    const struct httpd_options opt = {.host = "127.0.0.1", .tls_client_ca_pem = "x"};
    struct httpd *server = NULL;
    char err[256];
    assert_int_equal(httpd_start(&opt, handle, &calls, &server, err, sizeof err), -1);
    assert_null(server);
    assert_non_null(strstr(err, "client certificates need TLS"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_httpd_serves_and_stops),
        cmocka_unit_test(test_httpd_bad_host),
        cmocka_unit_test(test_httpd_host_is_numeric),
        cmocka_unit_test(test_httpd_one_polling_thread_drops_bodies),
        cmocka_unit_test(test_httpd_header),
        cmocka_unit_test(test_httpd_request_deadline),
        cmocka_unit_test(test_httpd_per_ip_limit),
        cmocka_unit_test(test_httpd_full_table_sheds_idle),
        cmocka_unit_test(test_httpd_full_of_busy_refuses),
        cmocka_unit_test(test_httpd_held_bodies_bound),
        cmocka_unit_test(test_httpd_client_ca_needs_tls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
