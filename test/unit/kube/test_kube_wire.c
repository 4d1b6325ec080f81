/* test_kube_wire.c -- the pure parts of the Kubernetes client: watch-stream
 * line splitting across arbitrary chunk boundaries, Status error parsing,
 * base64, and the retry policy arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* ---- line splitting ------------------------------------------------------- */

struct collected {
    char lines[16][256];
    int count;
    int fail_at; /* return non-zero for this line number (1-based); 0 never */
};

static int collect(const char *line, size_t len, void *ctx)
{
    struct collected *c = ctx;
    assert_true(c->count < 16);
    assert_true(len < 256);
    memcpy(c->lines[c->count], line, len);
    c->lines[c->count][len] = '\0';
    c->count++;
    return c->fail_at == c->count ? 7 : 0;
}

static const char STREAM[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}\r\n"
    "\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"c\"}}}\n";

static void assert_three_events(const struct collected *c)
{
    assert_int_equal(c->count, 3);
    assert_string_equal(c->lines[0],
                        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}");
    assert_string_equal(c->lines[1],
                        "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}");
    assert_string_equal(c->lines[2],
                        "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"c\"}}}");
}

/* Every way of cutting the stream into three chunks yields the same lines. */
static void test_lines_every_two_cuts(void **state)
{
    size_t n = strlen(STREAM);
    for (size_t i = 0; i <= n; i++) {
        for (size_t j = i; j <= n; j++) {
            struct kube_lines lines;
            struct collected c = {0};
            bool too_large;
            kube_lines_init(&lines, 1024);
            assert_int_equal(kube_lines_feed(&lines, STREAM, i, collect, &c, &too_large), 0);
            assert_int_equal(kube_lines_feed(&lines, STREAM + i, j - i, collect, &c, &too_large),
                             0);
            assert_int_equal(kube_lines_feed(&lines, STREAM + j, n - j, collect, &c, &too_large),
                             0);
            assert_three_events(&c);
            assert_int_equal(kube_lines_pending(&lines), 0);
            kube_lines_free(&lines);
        }
    }
}

static void test_lines_one_byte_chunks(void **state)
{
    struct kube_lines lines;
    struct collected c = {0};
    bool too_large;
    kube_lines_init(&lines, 1024);
    for (size_t i = 0; STREAM[i]; i++)
        assert_int_equal(kube_lines_feed(&lines, STREAM + i, 1, collect, &c, &too_large), 0);
    assert_three_events(&c);
    kube_lines_free(&lines);
}

static void test_lines_unfinished_tail_is_pending(void **state)
{
    struct kube_lines lines;
    struct collected c = {0};
    bool too_large;
    kube_lines_init(&lines, 1024);
    assert_int_equal(kube_lines_feed(&lines, "{\"a\":1}\n{\"b\"", 12, collect, &c, &too_large), 0);
    assert_int_equal(c.count, 1);
    assert_int_equal(kube_lines_pending(&lines), 4);
    kube_lines_free(&lines);
}

static void test_lines_bounded(void **state)
{
    struct kube_lines lines;
    struct collected c = {0};
    bool too_large = false;
    kube_lines_init(&lines, 16);
    /* A whole line inside one chunk is not copied, so it passes... */
    assert_int_equal(kube_lines_feed(&lines, "0123456789abcdefXYZ\n", 20, collect, &c, &too_large),
                     0);
    assert_int_equal(c.count, 1);
    /* ...but an unfinished line longer than the bound is refused. */
    assert_int_equal(kube_lines_feed(&lines, "0123456789", 10, collect, &c, &too_large), 0);
    assert_int_equal(kube_lines_feed(&lines, "abcdefgh", 8, collect, &c, &too_large), -1);
    assert_true(too_large);
    assert_true(lines.peak <= 16);
    kube_lines_free(&lines);
}

static void test_lines_callback_stops(void **state)
{
    struct kube_lines lines;
    struct collected c = {.fail_at = 2};
    bool too_large;
    kube_lines_init(&lines, 1024);
    assert_int_equal(kube_lines_feed(&lines, STREAM, strlen(STREAM), collect, &c, &too_large), 7);
    assert_false(too_large);
    assert_int_equal(c.count, 2);
    kube_lines_free(&lines);
}

/* ---- Status errors ---------------------------------------------------------- */

static void test_status_body(void **state)
{
    static const char body[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"pods \\\"x\\\" not found\",\"reason\":\"NotFound\","
        "\"details\":{\"name\":\"x\",\"kind\":\"pods\"},\"code\":404}";
    struct kube_error err = {0};
    kube_error_from_response(&err, 404, "GET /api/v1/namespaces/d/pods/x", body, strlen(body));
    assert_int_equal(err.http_status, 404);
    assert_string_equal(err.reason, "NotFound");
    assert_string_equal(err.message, "pods \"x\" not found");
}

static void test_status_conflict_message_verbatim(void **state)
{
    static const char body[] =
        "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Conflict\",\"code\":409,"
        "\"message\":\"Operation cannot be fulfilled on pods \\\"p\\\": the object has been "
        "modified; please apply your changes to the latest version and try again\"}";
    struct kube_error err = {0};
    kube_error_from_response(&err, 409, "PATCH p", body, strlen(body));
    assert_string_equal(err.reason, "Conflict");
    assert_non_null(strstr(err.message, "the object has been modified"));
}

static void test_non_status_body(void **state)
{
    static const char body[] = "<html>\n<body>Bad Gateway</body></html>";
    struct kube_error err = {0};
    kube_error_from_response(&err, 502, "GET /api/v1/nodes", body, strlen(body));
    assert_int_equal(err.http_status, 502);
    assert_string_equal(err.reason, "InternalError");
    assert_non_null(strstr(err.message, "GET /api/v1/nodes: HTTP 502: <html> <body>Bad Gateway"));
}

static void test_empty_body(void **state)
{
    struct kube_error err = {0};
    kube_error_from_response(&err, 429, "GET /x", "", 0);
    assert_string_equal(err.reason, "TooManyRequests");
    assert_string_equal(err.message, "GET /x: HTTP 429 with an empty body");
}

static void test_status_without_code_or_reason(void **state)
{
    static const char body[] = "{\"kind\":\"Status\",\"message\":\"boom\"}";
    struct kube_error err = {0};
    kube_error_from_response(&err, 503, "GET /x", body, strlen(body));
    assert_int_equal(err.http_status, 503); /* the HTTP status wins */
    assert_string_equal(err.message, "boom");
}

static void test_watch_error_status_gone(void **state)
{
    json_t *status = json_pack("{s:s, s:s, s:s, s:i}", "kind", "Status", "reason", "Expired",
                               "message", "too old resource version: 5 (90)", "code", 410);
    struct kube_error err = {0};
    assert_int_equal(kube_error_from_status(&err, status), 410);
    assert_string_equal(err.reason, "Expired");
    assert_string_equal(err.message, "too old resource version: 5 (90)");
    json_decref(status);
}

/* ---- base64 ------------------------------------------------------------------- */

static void test_base64(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"", ""},
        {"Zg==", "f"},
        {"Zm8=", "fo"},
        {"Zm9v", "foo"},
        {"Zm9vYg", "foob"}, /* padding optional */
        {"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t\nCg==\n", "-----BEGIN CERTIFICATE-----\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *out = NULL;
        size_t len = 0;
        assert_int_equal(kube_base64_decode(cases[i].in, strlen(cases[i].in), &out, &len), 0);
        assert_int_equal(len, strlen(cases[i].out));
        assert_memory_equal(out, cases[i].out, len);
        assert_int_equal(out[len], '\0');
        free(out);
    }
    static const char *const bad[] = {"Zm9v!", "Z", "Zg=a", "Zg===", "Zm9=v"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *out = NULL;
        size_t len;
        assert_int_equal(kube_base64_decode(bad[i], strlen(bad[i]), &out, &len), -1);
        assert_null(out);
    }
}

/* ---- retry policy -------------------------------------------------------------- */

static void test_retry_classes(void **state)
{
    assert_int_equal(kube_retry_class_of(429, 0), KUBE_RETRY_ALWAYS);
    assert_int_equal(kube_retry_class_of(500, 0), KUBE_RETRY_IDEMPOTENT);
    assert_int_equal(kube_retry_class_of(503, 0), KUBE_RETRY_IDEMPOTENT);
    assert_int_equal(kube_retry_class_of(504, 0), KUBE_RETRY_IDEMPOTENT);
    assert_int_equal(kube_retry_class_of(501, 0), KUBE_RETRY_NEVER);
    assert_int_equal(kube_retry_class_of(409, 0), KUBE_RETRY_NEVER);
    assert_int_equal(kube_retry_class_of(404, 0), KUBE_RETRY_NEVER);
    assert_int_equal(kube_retry_class_of(410, 0), KUBE_RETRY_NEVER);
    assert_int_equal(kube_retry_class_of(0, CURLE_COULDNT_CONNECT), KUBE_RETRY_ALWAYS);
    assert_int_equal(kube_retry_class_of(0, CURLE_OPERATION_TIMEDOUT), KUBE_RETRY_IDEMPOTENT);
    assert_int_equal(kube_retry_class_of(0, CURLE_GOT_NOTHING), KUBE_RETRY_IDEMPOTENT);
    assert_int_equal(kube_retry_class_of(0, CURLE_PEER_FAILED_VERIFICATION), KUBE_RETRY_NEVER);
}

static void test_backoff(void **state)
{
    struct kube_retry_policy p = {
        .max_attempts = 10, .initial_backoff_ms = 100, .max_backoff_ms = 1000};
    /* Without jitter (random01 = 0 gives the lower half bound). */
    assert_int_equal(kube_backoff_ms(&p, 1, 0.0, 0), 50);
    assert_int_equal(kube_backoff_ms(&p, 2, 0.0, 0), 100);
    assert_int_equal(kube_backoff_ms(&p, 3, 0.0, 0), 200);
    assert_int_equal(kube_backoff_ms(&p, 5, 0.0, 0), 500); /* capped at 1000 */
    assert_int_equal(kube_backoff_ms(&p, 50, 0.0, 0), 500);
    /* Jitter stays within [base/2, base). */
    for (double r = 0; r < 1; r += 0.125) {
        long w = kube_backoff_ms(&p, 2, r, 0);
        assert_true(w >= 100 && w < 200);
    }
    /* Retry-After is a floor. */
    assert_int_equal(kube_backoff_ms(&p, 1, 0.0, 3000), 3000);
    assert_int_equal(kube_backoff_ms(&p, 4, 0.999, 10), kube_backoff_ms(&p, 4, 0.999, 0));
}

static void test_retry_after(void **state)
{
    assert_int_equal(kube_retry_after_ms(NULL), 0);
    assert_int_equal(kube_retry_after_ms("1"), 1000);
    assert_int_equal(kube_retry_after_ms(" 3 "), 3000);
    assert_int_equal(kube_retry_after_ms("600"), 60000);
    assert_int_equal(kube_retry_after_ms("Wed, 21 Oct 2015 07:28:00 GMT"), 0);
    assert_int_equal(kube_retry_after_ms("-1"), 0);
    assert_int_equal(kube_retry_after_ms("2x"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_every_two_cuts),
        cmocka_unit_test(test_lines_one_byte_chunks),
        cmocka_unit_test(test_lines_unfinished_tail_is_pending),
        cmocka_unit_test(test_lines_bounded),
        cmocka_unit_test(test_lines_callback_stops),
        cmocka_unit_test(test_status_body),
        cmocka_unit_test(test_status_conflict_message_verbatim),
        cmocka_unit_test(test_non_status_body),
        cmocka_unit_test(test_empty_body),
        cmocka_unit_test(test_status_without_code_or_reason),
        cmocka_unit_test(test_watch_error_status_gone),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_retry_classes),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
