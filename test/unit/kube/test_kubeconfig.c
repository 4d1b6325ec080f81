/* test_kubeconfig.c -- kubeconfig and in-cluster configuration: every auth
 * form, relative paths, context selection, the search order, and clear
 * errors for bad files. Files are written into a fresh temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kube.h"
#include "kubeconfig.h"

#define PEM_CA "-----BEGIN CERTIFICATE-----\nQ0EK\n-----END CERTIFICATE-----\n"
#define PEM_CERT "-----BEGIN CERTIFICATE-----\nQ0VSVAo=\n-----END CERTIFICATE-----\n"
#define PEM_KEY "-----BEGIN PRIVATE KEY-----\nS0VZCg==\n-----END PRIVATE KEY-----\n"
/* base64 of PEM_CA and PEM_KEY */
#define PEM_CA_B64 \
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClEwRUsKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
#define PEM_KEY_B64 \
    "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tClMwVlpDZz09Ci0tLS0tRU5EIFBSSVZBVEUgS0VZLS0tLS0K"

struct fixture {
    char dir[64];
    char path[256];
    char err[1024];
    struct kube_config cfg;
};

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/gp-kubeconfig-XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/conf", fx->dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof sub, "%s/conf/pki", fx->dir);
    mkdir(sub, 0700);
    snprintf(fx->path, sizeof fx->path, "%s/conf/config", fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    kube_config_free(&fx->cfg);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
    assert_int_equal(system(cmd), 0);
    free(fx);
    return 0;
}

/* Writes the kubeconfig text to conf/config and loads it. */
static int load(struct fixture *fx, const char *context, const char *text)
{
    char conf[128];
    snprintf(conf, sizeof conf, "%s/conf", fx->dir);
    write_file(conf, "config", text);
    kube_config_free(&fx->cfg);
    fx->err[0] = '\0';
    return kube_config_load_file(fx->path, context, &fx->cfg, fx->err, sizeof fx->err);
}

static void assert_err_contains(struct fixture *fx, const char *needle)
{
    if (strstr(fx->err, needle) == NULL)
        fail_msg("error \"%s\" does not contain \"%s\"", fx->err, needle);
}

static void test_token_and_ca_data(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(load(fx, NULL,
                          "apiVersion: v1\n"
                          "kind: Config\n"
                          "current-context: dev\n"
                          "clusters:\n"
                          "- name: c1\n"
                          "  cluster:\n"
                          "    server: https://10.0.0.1:6443/\n"
                          "    certificate-authority-data: " PEM_CA_B64 "\n"
                          "contexts:\n"
                          "- name: dev\n"
                          "  context: {cluster: c1, user: u1, namespace: gpu}\n"
                          "users:\n"
                          "- name: u1\n"
                          "  user:\n"
                          "    token: abc.def\n"),
                     0);
    assert_string_equal(fx->cfg.server, "https://10.0.0.1:6443"); /* trailing '/' dropped */
    assert_string_equal(fx->cfg.ns, "gpu");
    assert_string_equal(fx->cfg.token, "abc.def");
    assert_null(fx->cfg.token_file);
    assert_string_equal((char *)fx->cfg.ca.data, PEM_CA);
    assert_int_equal(fx->cfg.ca.len, strlen(PEM_CA));
    assert_null(fx->cfg.cert.data);
    assert_false(fx->cfg.insecure);
    assert_non_null(strstr(fx->cfg.origin, "context dev"));
}

static void test_client_cert_files_relative_to_kubeconfig(void **state)
{
    struct fixture *fx = *state;
    char pki[128];
    snprintf(pki, sizeof pki, "%s/conf/pki", fx->dir);
    write_file(pki, "ca.crt", PEM_CA);
    write_file(pki, "client.crt", PEM_CERT);
    write_file(pki, "client.key", PEM_KEY);
    assert_int_equal(chdir("/"), 0); /* relative to the file, not to the cwd */
    assert_int_equal(load(fx, NULL,
                          "current-context: kind\n"
                          "clusters:\n"
                          "- name: kind\n"
                          "  cluster:\n"
                          "    server: https://127.0.0.1:40000\n"
                          "    certificate-authority: pki/ca.crt\n"
                          "contexts:\n"
                          "- name: kind\n"
                          "  context:\n"
                          "    cluster: kind\n"
                          "    user: admin\n"
                          "users:\n"
                          "- name: admin\n"
                          "  user:\n"
                          "    client-certificate: pki/client.crt\n"
                          "    client-key: ./pki/client.key\n"),
                     0);
    assert_string_equal((char *)fx->cfg.ca.data, PEM_CA);
    assert_string_equal((char *)fx->cfg.cert.data, PEM_CERT);
    assert_string_equal((char *)fx->cfg.key.data, PEM_KEY);
    assert_string_equal(fx->cfg.ns, "default");
    assert_null(fx->cfg.token);
}

static void test_client_cert_data_and_insecure(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(load(fx, NULL,
                          "current-context: x\n"
                          "clusters:\n"
                          "- name: c\n"
                          "  cluster:\n"
                          "    server: https://[fd00::1]:6443\n"
                          "    insecure-skip-tls-verify: true\n"
                          "contexts:\n"
                          "- {name: x, context: {cluster: c, user: u}}\n"
                          "users:\n"
                          "- name: u\n"
                          "  user:\n"
                          "    client-certificate-data: " PEM_CA_B64 "\n"
                          "    client-key-data: " PEM_KEY_B64 "\n"),
                     0);
    assert_true(fx->cfg.insecure);
    assert_string_equal((char *)fx->cfg.cert.data, PEM_CA);
    assert_string_equal((char *)fx->cfg.key.data, PEM_KEY);
}

static void test_token_file_relative(void **state)
{
    struct fixture *fx = *state;
    char conf[128];
    snprintf(conf, sizeof conf, "%s/conf", fx->dir);
    write_file(conf, "token", "  sekret-token\n\n");
    assert_int_equal(load(fx, NULL,
                          "current-context: x\n"
                          "clusters: [{name: c, cluster: {server: 'http://localhost:8080'}}]\n"
                          "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                          "users: [{name: u, user: {tokenFile: token}}]\n"),
                     0);
    char expect[256];
    snprintf(expect, sizeof expect, "%s/conf/token", fx->dir);
    assert_string_equal(fx->cfg.token_file, expect);
    char *token = kube_read_token_file(fx->cfg.token_file, fx->err, sizeof fx->err);
    assert_string_equal(token, "sekret-token"); /* whitespace trimmed */
    free(token);
}

static const char TWO_CONTEXTS[] = "current-context: a\n"
                                   "clusters:\n"
                                   "- {name: ca, cluster: {server: 'https://a:6443'}}\n"
                                   "- {name: cb, cluster: {server: 'https://b:6443'}}\n"
                                   "contexts:\n"
                                   "- {name: a, context: {cluster: ca}}\n"
                                   "- {name: b, context: {cluster: cb, namespace: other}}\n";

static void test_context_selection(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(load(fx, NULL, TWO_CONTEXTS), 0);
    assert_string_equal(fx->cfg.server, "https://a:6443");
    assert_int_equal(load(fx, "b", TWO_CONTEXTS), 0);
    assert_string_equal(fx->cfg.server, "https://b:6443");
    assert_string_equal(fx->cfg.ns, "other");
    assert_int_equal(load(fx, "nope", TWO_CONTEXTS), -1);
    assert_err_contains(fx, "context \"nope\" not found in contexts");
    assert_null(fx->cfg.server); /* nothing left to free after a failure */
}

/* Each bad kubeconfig: the message names the file, the line and the problem. */
static void test_errors(void **state)
{
    struct fixture *fx = *state;
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"", "empty kubeconfig"},
        {"- a\n- b\n", "a kubeconfig must be a mapping"},
        {"clusters: []\n", ":1: no current-context set"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "contexts:\n- name: x\n  context: {cluster: missing}\n",
         ":5: cluster \"missing\" not found in clusters"},
        {"current-context: x\nclusters: [{name: c, cluster: {}}]\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         "clusters[name=c].cluster.server is not set"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'ftp://h'}}]\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         ":2: clusters[name=c].cluster.server \"ftp://h\" must start with https:// or http://"},
        {"current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h\n"
         "    certificate-authority-data: '%%%'\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         ":6: clusters[name=c].cluster.certificate-authority-data is not valid base64"},
        {"current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h\n"
         "    certificate-authority-data: aGVsbG8=\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         "does not decode to PEM"},
        {"current-context: x\nclusters:\n- name: c\n  cluster:\n    server: https://h\n"
         "    certificate-authority: no/such/ca.crt\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         "/conf/no/such/ca.crt: No such file or directory"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
         "users:\n- name: u\n  user:\n    exec:\n      command: aws\n",
         ":8: users[name=u].user.exec.apiVersion is not set"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
         "users:\n- name: u\n  user:\n    client-certificate-data: " PEM_CA_B64 "\n",
         "client-certificate is set without client-key"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
         "users: [{name: u, user: {tokenFile: /nonexistent/token}}]\n",
         "tokenFile: /nonexistent/token: No such file or directory"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: [1]}}]\n"
         "contexts: [{name: x, context: {cluster: c}}]\n",
         ":2: clusters[name=c].cluster.server must be a string, not a list"},
        {"current-context: x\nclusters: [{name: c, cluster: {server: 'https://h', "
         "insecure-skip-tls-verify: 'yes'}}]\ncontexts: [{name: x, context: {cluster: c}}]\n",
         "insecure-skip-tls-verify must be true or false"},
        {"current-context: x\nclusters: {c: 1}\ncontexts: [{name: x, context: {cluster: c}}]\n",
         ":2: clusters must be a list, not a mapping"},
        {"current-context: [x\n", "config:"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(load(fx, NULL, cases[i].text), -1);
        assert_err_contains(fx, fx->path); /* every message names the file */
        assert_err_contains(fx, cases[i].needle);
    }
}

static void test_missing_file(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(
        kube_config_load_file("/nonexistent/kubeconfig", NULL, &fx->cfg, fx->err, sizeof fx->err),
        -1);
    assert_err_contains(fx, "/nonexistent/kubeconfig");
}

static void write_serviceaccount(struct fixture *fx, char *sa, size_t salen)
{
    snprintf(sa, salen, "%s/sa", fx->dir);
    mkdir(sa, 0700);
    write_file(sa, "token", "sa-token-1\n");
    write_file(sa, "ca.crt", PEM_CA);
    write_file(sa, "namespace", "kube-system");
}

static void test_in_cluster(void **state)
{
    struct fixture *fx = *state;
    char sa[128];
    write_serviceaccount(fx, sa, sizeof sa);
    setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kube_config_in_cluster(sa, &fx->cfg, fx->err, sizeof fx->err), 0);
    assert_string_equal(fx->cfg.server, "https://[fd00:10:96::1]:443");
    assert_string_equal(fx->cfg.ns, "kube-system");
    assert_string_equal((char *)fx->cfg.ca.data, PEM_CA);
    assert_non_null(strstr(fx->cfg.token_file, "/sa/token"));
    kube_config_free(&fx->cfg);

    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    assert_int_equal(kube_config_in_cluster(sa, &fx->cfg, fx->err, sizeof fx->err), 0);
    assert_string_equal(fx->cfg.server, "https://10.96.0.1:443");
    kube_config_free(&fx->cfg);

    char token[160];
    snprintf(token, sizeof token, "%s/token", sa);
    unlink(token);
    assert_int_equal(kube_config_in_cluster(sa, &fx->cfg, fx->err, sizeof fx->err), -1);
    assert_err_contains(fx, "in-cluster: service account token:");
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(kube_config_in_cluster(sa, &fx->cfg, fx->err, sizeof fx->err), -1);
    assert_err_contains(fx, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

static void test_search_order(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(load(fx, NULL, TWO_CONTEXTS), 0);
    kube_config_free(&fx->cfg);
    char list[512];
    /* $KUBECONFIG: the first entry that exists. */
    snprintf(list, sizeof list, "/nonexistent/one:%s", fx->path);
    setenv("KUBECONFIG", list, 1);
    assert_int_equal(kube_config_resolve(&(struct kube_config_select){.context = "b"}, &fx->cfg,
                                         fx->err, sizeof fx->err),
                     0);
    assert_string_equal(fx->cfg.server, "https://b:6443");
    kube_config_free(&fx->cfg);
    /* An explicit path wins over $KUBECONFIG. */
    setenv("KUBECONFIG", "/nonexistent/one", 1);
    assert_int_equal(kube_config_resolve(&(struct kube_config_select){.kubeconfig = fx->path},
                                         &fx->cfg, fx->err, sizeof fx->err),
                     0);
    kube_config_free(&fx->cfg);
    assert_int_equal(
        kube_config_resolve(&(struct kube_config_select){0}, &fx->cfg, fx->err, sizeof fx->err),
        -1);
    assert_err_contains(fx, "KUBECONFIG=/nonexistent/one: no such file");
    /* No $KUBECONFIG, no ~/.kube/config: in-cluster, which also fails here. */
    unsetenv("KUBECONFIG");
    setenv("HOME", fx->dir, 1);
    assert_int_equal(
        kube_config_resolve(&(struct kube_config_select){0}, &fx->cfg, fx->err, sizeof fx->err),
        -1);
    assert_err_contains(fx, "no kubeconfig");
    assert_err_contains(fx, "not running in a pod");
    /* ~/.kube/config is found. */
    char kube[128];
    snprintf(kube, sizeof kube, "%s/.kube", fx->dir);
    mkdir(kube, 0700);
    write_file(kube, "config", TWO_CONTEXTS);
    assert_int_equal(
        kube_config_resolve(&(struct kube_config_select){0}, &fx->cfg, fx->err, sizeof fx->err), 0);
    assert_string_equal(fx->cfg.server, "https://a:6443");
    kube_config_free(&fx->cfg);
    /* Forced in-cluster ignores the files. */
    char sa[128];
    write_serviceaccount(fx, sa, sizeof sa);
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
    assert_int_equal(
        kube_config_resolve(&(struct kube_config_select){.in_cluster = true, .sa_dir = sa},
                            &fx->cfg, fx->err, sizeof fx->err),
        0);
    assert_string_equal(fx->cfg.server, "https://10.0.0.1:6443");
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

/* The client exposes what it resolved; a bad file fails kube_client_new. */
static void test_client_new(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(load(fx, "b", TWO_CONTEXTS), 0);
    struct kube_client_options opt = {.kubeconfig = fx->path, .context = "b"};
    struct kube_client *client = kube_client_new(&opt, fx->err, sizeof fx->err);
    assert_non_null(client);
    assert_string_equal(kube_client_server(client), "https://b:6443");
    assert_string_equal(kube_client_namespace(client), "other");
    kube_client_free(client);
    opt.context = "missing";
    assert_null(kube_client_new(&opt, fx->err, sizeof fx->err));
    assert_err_contains(fx, "context \"missing\" not found");
    char *escaped = kube_escape("spec.nodeName=node 1,x");
    assert_string_equal(escaped, "spec.nodeName%3Dnode%201%2Cx");
    free(escaped);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_token_and_ca_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_cert_files_relative_to_kubeconfig, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_client_cert_data_and_insecure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_file_relative, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_selection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_cluster, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_new, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
