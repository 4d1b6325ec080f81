/* fuzz_extender_route.c -- the extender's request handler, extender_handle()
 * (extender.c: the routes of both prefixes, /gpupool-scheduler/... and
 * /gpushare-scheduler/..., the GET pages, methods), on an extender made by
 * extender_config_load() + extender_new() from a kubeconfig naming a port
 * nothing listens on; its cache stays empty and nothing is synced, which
 * contacts no API server.
 *
 * Input: the first line is "METHOD PATH", the rest the body. A POST whose
 * path ends in "bind" is sent with its body cut to nothing: a real bind of a
 * pod the empty cache does not know GETs it from the API server (retried
 * with backoff against the closed port: seconds per input); the bind body
 * itself is fuzzed by fuzz_extender. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extender.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char kubeconfig[] = "apiVersion: v1\n"
                                 "kind: Config\n"
                                 "current-context: c\n"
                                 "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                                 "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                                 "users: [{name: u, user: {token: t}}]\n";

static struct extender *make_extender(void)
{
    static struct extender_config cfg;
    const char *path = fz_file_n(1, (const uint8_t *)kubeconfig, sizeof(kubeconfig) - 1);
    char *argv[] = {"gpupool-scheduler-extender", "--kubeconfig", (char *)path, NULL};
    char *envp[] = {NULL};
    char err[1024];
    if (extender_config_load(&cfg, 3, argv, envp, err, sizeof(err)) != EXTENDER_CONFIG_OK) {
        fprintf(stderr, "fuzz_extender_route: %s\n", err);
        abort();
    }
    struct extender *ext = extender_new(&cfg, err, sizeof(err));
    if (!ext) {
        fprintf(stderr, "fuzz_extender_route: %s\n", err);
        abort();
    }
    return ext;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    static struct extender *ext;
    if (!ext)
        ext = make_extender();
    const uint8_t *line;
    size_t n = fz_split(&data, &size, "\n", &line);
    char *head = malloc(n + 1), *body = malloc(size + 1);
    if (!head || !body) {
        free(head);
        free(body);
        return 0;
    }
    memcpy(head, line, n);
    head[n] = '\0';
    memcpy(body, data, size);
    body[size] = '\0';
    char *sp = strchr(head, ' ');
    const char *method = head, *path = sp ? sp + 1 : "/";
    if (sp)
        *sp = '\0';
    size_t plen = strlen(path);
    if (strcmp(method, "POST") == 0 && plen >= 4 && strcmp(path + plen - 4, "bind") == 0)
        size = 0, body[0] = '\0';
    const struct httpd_request req = {.method = method, .path = path, .body = body, .len = size};
    struct httpd_response resp = {.status = 500};
    extender_handle(ext, &req, &resp);
    if (resp.status < 200 || resp.status > 599 || !resp.content_type)
        abort(); /* every route answers with a status and a type */
    if (!resp.body_static)
        free(resp.body);
    free(head);
    free(body);
    return 0;
}
