/* exec_credential.h -- client.authentication.k8s.io exec credential plugins
 * (a kubeconfig user's `exec`: aws eks get-token, gke-gcloud-auth-plugin,
 * kubelogin, ...), as kubectl runs them.
 *
 * The plugin is started without a shell (posix_spawnp: a bare command is
 * looked up in PATH) with the kubeconfig's args, its env added to ours and
 * KUBERNETES_EXEC_INFO holding an ExecCredential whose spec says whether it
 * may talk to the user (interactiveMode: stdin is then ours, else
 * /dev/null) and, with provideClusterInfo, the cluster (server,
 * certificate-authority-data, insecure-skip-tls-verify). Its stderr is
 * ours (prompts and messages pass through); its stdout, at most 1 MiB,
 * must be an ExecCredential of the same apiVersion with status.token, or
 * status.clientCertificateData + clientKeyData (PEM), and optionally
 * status.expirationTimestamp (RFC 3339). A plugin still running after
 * timeout_ms is killed.
 *
 * Caching: answers are kept in memory for the life of the process, one per
 * plugin configuration (command, args, env, apiVersion, server), shared by
 * every client (kubectl-gpupool's two connections run the plugin once),
 * and reused until their expirationTimestamp passes (none: the whole run)
 * or a caller reports that the server refused it (401).
 *
 * Threads: kube_exec_credential_get is thread-safe. Concurrent callers of
 * one configuration wait for one run instead of starting several, each for
 * no longer than its own deadline; no lock is held while the plugin runs.
 * Errors: 0/-1 with a message naming the plugin in err.
 * Owner: *out is the caller's (kube_exec_credential_free). */
#ifndef GP_KUBE_EXEC_CREDENTIAL_H
#define GP_KUBE_EXEC_CREDENTIAL_H

#include "kubeconfig.h"

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

struct kube_exec_credential {
    char *token;                /* status.token; NULL with a client certificate */
    struct kube_blob cert, key; /* status.clientCertificateData / clientKeyData */
    int64_t expires_ms;         /* expirationTimestamp, wall-clock ms since 1970; 0: none */
    uint64_t generation;        /* which run produced it (> 0), for _get's `refused` */
};

/* The credential of cfg->exec (which must be set): the cached one when it
 * is still valid and is not generation `refused` (0: none refused), else a
 * new run of the plugin (killed after timeout_ms, or at deadline_ns when
 * that comes first), or the answer of the run another caller has started.
 * deadline_ns: a clock_now_ns() instant past which the caller has no use
 * for the credential (0: none); -1 once it passes, whoever runs the plugin. */
GP_MUST_USE int kube_exec_credential_get(const struct kube_config *cfg, long timeout_ms,
                                         uint64_t refused, int64_t deadline_ns,
                                         struct kube_exec_credential *out, char *err,
                                         size_t errlen);

/* Reads a plugin's answer (stdout) that must be of api_version; `command`
 * names it in messages. Leaves generation 0. */
GP_MUST_USE int kube_exec_credential_parse(const char *text, size_t len, const char *api_version,
                                           const char *command, struct kube_exec_credential *out,
                                           char *err, size_t errlen);

/* true when the credential carries an expiry that is at or before now_ms. */
bool kube_exec_credential_expired(const struct kube_exec_credential *cred, int64_t now_ms);

/* RFC 3339 ("2026-01-02T15:04:05Z", fractions, "+01:00") to milliseconds
 * since 1970; -1 when malformed. */
int64_t kube_rfc3339_ms(const char *text);

void kube_exec_credential_free(struct kube_exec_credential *cred);

#endif
