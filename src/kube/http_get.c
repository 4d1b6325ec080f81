/* http_get.c -- one plain HTTP GET outside the API server (kube.h): the
 * extender reading a node agent's /metrics at the node's own address. A
 * fresh libcurl handle per call (every call goes to another host, so there
 * is no connection to keep), so any thread may call it. */
#include "curl_api.h"
#include "kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clock.h"

struct answer {
    struct buf body;
    size_t max;
    bool too_large;
    struct kube_cancel *cancel;
};

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct answer *a = userdata;
    size_t n = size * nmemb;
    if (a->body.len + n > a->max) {
        a->too_large = true;
        return 0; /* aborts the transfer */
    }
    return buf_add(&a->body, ptr, n) ? n : 0;
}

static int on_progress(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    struct answer *a = userdata;
    return kube_cancel_fired(a->cancel); /* non-zero aborts */
}

int kube_http_get(const char *url, const char *accept, int64_t deadline_ns, size_t max_resp,
                  struct kube_cancel *cancel, long *status, char **resp, size_t *len, char *err,
                  size_t errlen)
{
    *resp = NULL;
    *len = 0;
    *status = 0;
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "GET %s: not an http:// URL", url);
        return -1;
    }
    long left_ms = (long)((deadline_ns - clock_now_ns()) / 1000000);
    if (left_ms <= 0) {
        snprintf(err, errlen, "deadline passed before it was sent");
        return -1;
    }
    const struct kube_curl *curl = kube_curl_get(err, errlen);
    if (curl == NULL)
        return -1;
    CURL *h = curl->easy_init();
    struct curl_slist *headers = NULL;
    char accept_line[160];
    snprintf(accept_line, sizeof accept_line, "Accept: %s", accept ? accept : "*/*");
    if (h == NULL || !(headers = curl->slist_append(NULL, accept_line))) {
        snprintf(err, errlen, "GET %s: out of memory", url);
        curl->easy_cleanup(h);
        return -1;
    }
    struct answer a = {.body = {.first_cap = 16384}, .max = max_resp, .cancel = cancel};
    char message[CURL_ERROR_SIZE] = "";
    curl->easy_setopt(h, CURLOPT_URL, url);
    curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
    /* The node's address, as it is: an http_proxy from the environment is
     * for the way out of the cluster, not to the nodes. */
    curl->easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, left_ms);
    curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, left_ms);
    curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl->easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl->easy_setopt(h, CURLOPT_WRITEDATA, &a);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, message);
    if (cancel != NULL) {
        curl->easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl->easy_setopt(h, CURLOPT_XFERINFODATA, &a);
    }
    CURLcode code = curl->easy_perform(h);
    curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl->slist_free_all(headers);
    curl->easy_cleanup(h);
    if (code != CURLE_OK) {
        snprintf(err, errlen, "%s",
                 a.too_large                         ? "answer too large"
                 : code == CURLE_ABORTED_BY_CALLBACK ? "cancelled"
                 : message[0]                        ? message
                                                     : curl->easy_strerror(code));
        free(a.body.data);
        *status = 0;
        return -1;
    }
    *resp = a.body.data ? buf_take(&a.body, len) : strdup(""); /* a buf holds its NUL */
    if (*resp == NULL) {
        snprintf(err, errlen, "GET %s: out of memory", url);
        return -1;
    }
    return 0;
}
