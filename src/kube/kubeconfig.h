/* kubeconfig.h -- where the API server is and how to authenticate to it.
 *
 * Two sources, resolved into one struct kube_config:
 *  - a kubeconfig file (YAML): the chosen context (current-context unless
 *    named) gives the cluster, the user and the namespace.
 *      clusters[].cluster: server, certificate-authority,
 *        certificate-authority-data, insecure-skip-tls-verify
 *      users[].user: token, tokenFile, client-certificate(-data),
 *        client-key(-data), username + password
 *      contexts[].context: cluster, user, namespace
 *    Relative file paths are relative to the kubeconfig's directory. Files
 *    and *-data values (base64 PEM) are read into memory here and handed to
 *    libcurl as blobs: no temporary files.
 *    exec and auth-provider users are refused with a clear message.
 *  - the in-cluster service account: <dir>/token (re-read as it rotates),
 *    <dir>/ca.crt, <dir>/namespace, and KUBERNETES_SERVICE_HOST/PORT.
 *
 * Errors are "path:line: what" (or "in-cluster: what") in err.
 * Owner: kube_config_free() releases everything a successful load filled;
 * after a failed load nothing needs freeing. */
#ifndef GP_KUBE_KUBECONFIG_H
#define GP_KUBE_KUBECONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler.h"

struct kube_blob {
    unsigned char *data; /* NUL-terminated PEM; NULL when unset */
    size_t len;
};

struct kube_config {
    char *server;  /* "https://host:port", no trailing '/' */
    char *ns;      /* the context's namespace; "default" when unset */
    char *origin;  /* "kubeconfig /p (context c)" or "in-cluster", for messages */
    bool insecure; /* insecure-skip-tls-verify */
    /* PEM, read from the file or decoded from *-data at load time (a file is
     * checked then, not at the first request). ca unset: the system store. */
    struct kube_blob ca, cert, key;
    char *token;      /* static bearer token, or NULL */
    char *token_file; /* bearer token file re-read periodically, or NULL */
    char *username, *password;
};

/* Loads `path`, selecting `context` (NULL: current-context). */
int kube_config_load_file(const char *path, const char *context, struct kube_config *cfg, char *err,
                          size_t errlen) __attribute__((warn_unused_result));

/* In-cluster configuration; sa_dir NULL means
 * /var/run/secrets/kubernetes.io/serviceaccount. */
int kube_config_in_cluster(const char *sa_dir, struct kube_config *cfg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The search order of kube_client_new: explicit path; else $KUBECONFIG's
 * first existing entry (error if it names none that exists); else
 * ~/.kube/config if it exists; else in-cluster. force_in_cluster skips the
 * files. */
int kube_config_resolve(const char *path, const char *context, bool force_in_cluster,
                        const char *sa_dir, struct kube_config *cfg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

void kube_config_free(struct kube_config *cfg);

/* Reads a token file into a malloc'ed string with surrounding whitespace
 * trimmed. NULL with err set when unreadable or empty. */
GP_MUST_USE char *kube_read_token_file(const char *path, char *err, size_t errlen);

#endif
