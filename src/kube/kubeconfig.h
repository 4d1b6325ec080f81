/* kubeconfig.h -- where the API server is and how to authenticate to it.
 *
 * Two sources, resolved into one struct kube_config:
 *  - kubeconfig files (YAML), merged the way kubectl merges a
 *    ':'-separated $KUBECONFIG: the first file that names a cluster, user
 *    or context wins that whole entry; current-context comes from the
 *    first file that sets one; files that do not exist are skipped.
 *    The chosen context (--context, else current-context) gives the
 *    cluster, the user and the namespace; --cluster / --user override its
 *    cluster and user.
 *      clusters[].cluster: server, certificate-authority,
 *        certificate-authority-data, insecure-skip-tls-verify
 *      users[].user: token, tokenFile, client-certificate(-data),
 *        client-key(-data), username + password, exec (a credential
 *        plugin, run later by exec_credential.c), auth-provider (oidc with
 *        an id-token only; gcp, azure and others: an error naming the exec
 *        plugin that replaces them)
 *      contexts[].context: cluster, user, namespace
 *    Relative file paths (and an exec command with a '/') are relative to
 *    the directory of the file that names them. Files and *-data values
 *    (base64 PEM) are read into memory here and handed to libcurl as
 *    blobs: no temporary files.
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

/* users[].user.exec: a client.authentication.k8s.io ExecCredential plugin. */
enum kube_exec_interactive {
    KUBE_EXEC_NEVER,
    KUBE_EXEC_IF_AVAILABLE, /* v1beta1's default */
    KUBE_EXEC_ALWAYS,
};

struct kube_exec_config {
    char *api_version; /* client.authentication.k8s.io/v1 or /v1beta1 */
    char *command;     /* a bare name is looked up in PATH */
    char **args;       /* nargs strings */
    size_t nargs;
    char **env; /* nenv "NAME=value" strings, added to the environment */
    size_t nenv;
    enum kube_exec_interactive interactive;
    bool provide_cluster_info; /* KUBERNETES_EXEC_INFO carries spec.cluster */
    char *install_hint;        /* shown when the command cannot be run; may be NULL */
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
    struct kube_exec_config *exec; /* an exec user; NULL otherwise */
};

/* Which configuration: kubectl's flags. NULL / false fields are unset. */
struct kube_config_select {
    const char *kubeconfig; /* --kubeconfig: this file only, no merging */
    const char *context;    /* --context; NULL: current-context */
    const char *cluster;    /* --cluster: replaces the context's cluster */
    const char *user;       /* --user: replaces the context's user */
    bool in_cluster;        /* the service account even when files exist */
    const char *sa_dir;     /* NULL: /var/run/secrets/kubernetes.io/serviceaccount */
};

/* Loads `path`, selecting `context` (NULL: current-context). */
int kube_config_load_file(const char *path, const char *context, struct kube_config *cfg, char *err,
                          size_t errlen) __attribute__((warn_unused_result));

/* In-cluster configuration; sa_dir NULL means
 * /var/run/secrets/kubernetes.io/serviceaccount. */
int kube_config_in_cluster(const char *sa_dir, struct kube_config *cfg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Loads `n` files merged (see above) with sel's context, cluster and
 * user; sel->kubeconfig and in_cluster are not read. Files that do not
 * exist are skipped; none existing is an error. */
int kube_config_load_files(const char *const *paths, size_t n, const struct kube_config_select *sel,
                           struct kube_config *cfg, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The search order of kube_client_new: sel->kubeconfig; else every entry
 * of $KUBECONFIG, merged (error if it names none that exists); else
 * ~/.kube/config if it exists; else in-cluster. sel->in_cluster skips the
 * files. */
int kube_config_resolve(const struct kube_config_select *sel, struct kube_config *cfg, char *err,
                        size_t errlen) __attribute__((warn_unused_result));

void kube_config_free(struct kube_config *cfg);

/* Reads a token file into a malloc'ed string with surrounding whitespace
 * trimmed. NULL with err set when unreadable or empty. */
GP_MUST_USE char *kube_read_token_file(const char *path, char *err, size_t errlen);

#endif
