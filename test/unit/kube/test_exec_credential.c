/* test_exec_credential.c -- an exec credential plugin's answer: both API
 * versions, tokens and client certificates, expiry timestamps, and a clear
 * error for every malformed answer; callers of a slow plugin keep their
 * deadlines. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "exec_credential.h"

#define V1 "client.authentication.k8s.io/v1"
#define V1BETA1 "client.authentication.k8s.io/v1beta1"

static int parse(const char *text, const char *version, struct kube_exec_credential *cred,
                 char *err, size_t errlen)
{
    return kube_exec_credential_parse(text, strlen(text), version, "plug", cred, err, errlen);
}

static void test_rfc3339(void **state)
{
    assert_int_equal(kube_rfc3339_ms("1970-01-01T00:00:00Z"), 0);
    assert_int_equal(kube_rfc3339_ms("2026-01-02T03:04:05Z"), 1767323045000LL);
    assert_int_equal(kube_rfc3339_ms("2026-01-02T03:04:05.25Z"), 1767323045250LL);
    assert_int_equal(kube_rfc3339_ms("2026-01-02T04:04:05+01:00"), 1767323045000LL);
    assert_int_equal(kube_rfc3339_ms("2026-01-02T02:04:05-01:00"), 1767323045000LL);
    assert_int_equal(kube_rfc3339_ms("2026-01-02 03:04:05"), -1);  /* no zone */
    assert_int_equal(kube_rfc3339_ms("2026-13-02T03:04:05Z"), -1); /* month 13 */
    assert_int_equal(kube_rfc3339_ms("2026-01-02T03:04:05Zjunk"), -1);
    assert_int_equal(kube_rfc3339_ms("tomorrow"), -1);
    assert_int_equal(kube_rfc3339_ms(NULL), -1);
}

static void test_token_and_expiry(void **state)
{
    struct kube_exec_credential c;
    char err[512] = "";
    assert_int_equal(parse("{\"apiVersion\":\"" V1BETA1 "\",\"kind\":\"ExecCredential\","
                           "\"status\":{\"token\":\"abc\","
                           "\"expirationTimestamp\":\"2026-01-02T03:04:05Z\"}}",
                           V1BETA1, &c, err, sizeof err),
                     0);
    assert_string_equal(c.token, "abc");
    assert_null(c.cert.data);
    assert_int_equal(c.expires_ms, 1767323045000LL);
    assert_false(kube_exec_credential_expired(&c, 1767323044999LL));
    assert_true(kube_exec_credential_expired(&c, 1767323045000LL));
    kube_exec_credential_free(&c);
    assert_int_equal(
        parse("{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\","
              "\"status\":{\"clientCertificateData\":\"-----BEGIN CERTIFICATE-----\\n\","
              "\"clientKeyData\":\"-----BEGIN PRIVATE KEY-----\\n\"}}",
              V1, &c, err, sizeof err),
        0);
    assert_null(c.token);
    assert_non_null(c.cert.data);
    assert_non_null(c.key.data);
    assert_int_equal(c.expires_ms, 0);
    assert_false(kube_exec_credential_expired(&c, INT64_MAX));
    kube_exec_credential_free(&c);
}

static void test_errors(void **state)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"not json", "malformed JSON"},
        {"[1]", "not a JSON object"},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"Pod\",\"status\":{\"token\":\"t\"}}",
         "kind is \"Pod\""},
        {"{\"apiVersion\":\"" V1BETA1
         "\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}",
         "apiVersion is \"" V1BETA1 "\", the kubeconfig asked for " V1},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\"}", "has no status"},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\",\"status\":{}}",
         "neither token nor clientCertificateData"},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\",\"status\":{\"token\":7}}",
         "status.token must be a string"},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\",\"status\":"
         "{\"clientCertificateData\":\"-----BEGIN CERTIFICATE-----\"}}",
         "clientCertificateData is set without clientKeyData"},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\",\"status\":"
         "{\"clientCertificateData\":\"abc\",\"clientKeyData\":\"def\"}}",
         "is not PEM"},
        {"{\"apiVersion\":\"" V1 "\",\"kind\":\"ExecCredential\",\"status\":"
         "{\"token\":\"t\",\"expirationTimestamp\":\"soon\"}}",
         "expirationTimestamp \"soon\" is not RFC 3339"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct kube_exec_credential c;
        char err[512] = "";
        assert_int_equal(parse(cases[i].text, V1, &c, err, sizeof err), -1);
        if (strstr(err, cases[i].want) == NULL || strncmp(err, "exec plugin plug", 16) != 0)
            fail_msg("case %zu: \"%s\" does not contain \"%s\"", i, err, cases[i].want);
        assert_null(c.token);
        assert_null(c.cert.data);
    }
}

/* A plugin run by sh -c `script`: the cache key holds the script, so each
 * script is a cache entry of its own. */
struct slow_plugin {
    char *args[2];
    struct kube_exec_config exec;
    struct kube_config cfg;
};

static void slow_plugin_init(struct slow_plugin *p, const char *script)
{
    p->args[0] = "-c";
    p->args[1] = (char *)script;
    p->exec = (struct kube_exec_config){.api_version = V1,
                                        .command = "/bin/sh",
                                        .args = p->args,
                                        .nargs = 2,
                                        .interactive = KUBE_EXEC_NEVER};
    p->cfg = (struct kube_config){.server = "https://127.0.0.1:1", .exec = &p->exec};
}

struct runner {
    struct kube_config *cfg;
    int rc;
    struct kube_exec_credential cred;
};

static void *run_without_deadline(void *arg)
{
    struct runner *r = arg;
    char err[512];
    r->rc = kube_exec_credential_get(r->cfg, 10000, 0, 0, &r->cred, err, sizeof err);
    return NULL;
}

/* A caller with a deadline does not wait past it for a run another caller
 * started (the Lease renew behind a bind's plugin run, docs/ha.md); the
 * run's answer is cached for the next caller. */
static void test_waiter_keeps_its_deadline(void **state)
{
    struct slow_plugin p;
    slow_plugin_init(&p, "sleep 1; printf '{\"apiVersion\":\"" V1 "\",\"kind\":"
                         "\"ExecCredential\",\"status\":{\"token\":\"slow\"}}'");
    struct runner r = {.cfg = &p.cfg};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_without_deadline, &r), 0);
    struct timespec nap = {.tv_nsec = 200 * 1000000L}; /* the plugin is running */
    nanosleep(&nap, NULL);
    struct kube_exec_credential c;
    char err[512] = "";
    int64_t t0 = clock_now_ns();
    assert_int_equal(
        kube_exec_credential_get(&p.cfg, 10000, 0, t0 + 200 * 1000000LL, &c, err, sizeof err), -1);
    int64_t waited_ms = (clock_now_ns() - t0) / 1000000;
    assert_true(waited_ms >= 190 && waited_ms < 600);
    assert_non_null(strstr(err, "deadline passed"));
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.cred.token, "slow");
    kube_exec_credential_free(&r.cred);
    t0 = clock_now_ns();
    assert_int_equal(
        kube_exec_credential_get(&p.cfg, 10000, 0, t0 + 200 * 1000000LL, &c, err, sizeof err), 0);
    assert_string_equal(c.token, "slow");
    assert_true(clock_now_ns() - t0 < 100 * 1000000LL); /* cached: no run */
    kube_exec_credential_free(&c);
}

/* A run started by a caller with a deadline is killed at that deadline. */
static void test_runner_stops_at_its_deadline(void **state)
{
    struct slow_plugin p;
    slow_plugin_init(&p, "exec sleep 5"); /* exec: killing it leaves no orphan */
    struct kube_exec_credential c;
    char err[512] = "";
    int64_t t0 = clock_now_ns();
    assert_int_equal(
        kube_exec_credential_get(&p.cfg, 10000, 0, t0 + 300 * 1000000LL, &c, err, sizeof err), -1);
    int64_t took_ms = (clock_now_ns() - t0) / 1000000;
    assert_true(took_ms >= 290 && took_ms < 1500);
    assert_non_null(strstr(err, "killed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc3339),
        cmocka_unit_test(test_token_and_expiry),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_waiter_keeps_its_deadline),
        cmocka_unit_test(test_runner_stops_at_its_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
