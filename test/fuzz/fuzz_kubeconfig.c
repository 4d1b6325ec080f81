/* fuzz_kubeconfig.c -- kubeconfig files (kubeconfig.c): the input as the
 * file (a memfd) loaded with kube_config_load_file(), with the
 * current-context and with a context named "ctx"; and, when the input is an
 * exec plugin's answer instead, kube_exec_credential_parse() on it (the
 * other text an exec user hands the client). Files the kubeconfig names
 * (certificate-authority, tokenFile, ...) are read as the client reads them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec_credential.h"
#include "kubeconfig.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_quiet();
    const char *path = fz_file(data, size);
    static const char *const contexts[] = {NULL, "ctx"};
    for (size_t i = 0; i < sizeof(contexts) / sizeof(contexts[0]); i++) {
        struct kube_config cfg;
        char err[1024];
        memset(&cfg, 0, sizeof(cfg));
        if (kube_config_load_file(path, contexts[i], &cfg, err, sizeof(err)) == 0) {
            if (!cfg.server || !cfg.ns)
                abort(); /* a loaded configuration has a server and a namespace */
            kube_config_free(&cfg);
        } else if (!memchr(err, '\0', sizeof(err)) || !err[0]) {
            abort();
        }
    }
    struct kube_exec_credential cred;
    char err[1024];
    memset(&cred, 0, sizeof(cred));
    if (kube_exec_credential_parse((const char *)data, size, "client.authentication.k8s.io/v1",
                                   "fuzz-plugin", &cred, err, sizeof(err)) == 0)
        kube_exec_credential_free(&cred);
    return 0;
}
