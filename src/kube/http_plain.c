/* http_plain.c -- plain HTTP outside the API server (kube.h): the
 * extender's bind forwarding to its leader (POST) and its reads of node
 * agents' /metrics at the nodes' own addresses (GET). No credentials, no
 * retry, never an http_proxy from the environment (the way out of the
 * cluster, not to a replica's or a node's address). A fresh libcurl handle
 * per call: every call goes to another host, so there is no connection to
 * keep, and any thread may call while others use the API clients. */
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

/* One request, as the two callers below describe it: body NULL is a GET. */
struct plain_request {
    const char *method; /* for messages */
    const char *url;
    const char *protocols;         /* libcurl's CURLOPT_PROTOCOLS_STR */
    const char *header1, *header2; /* "Name: value" lines, may be NULL */
    const char *body;
    size_t body_len;
    long timeout_ms;
    size_t max_resp, first_cap;
    struct kube_cancel *cancel;
    bool url_in_errors; /* "POST <url>: ..." (the GET's caller names the URL itself) */
};

static int plain_perform(const struct plain_request *rq, long *status, char **resp, size_t *len,
                         char *err, size_t errlen)
{
    *resp = NULL;
    *status = 0;
    if (len)
        *len = 0;
    const struct kube_curl *curl = kube_curl_get(err, errlen);
    if (curl == NULL)
        return -1;
    CURL *h = curl->easy_init();
    struct curl_slist *headers = NULL;
    bool oom = h == NULL;
    const char *lines[] = {rq->header1, rq->header2};
    for (size_t i = 0; i < 2 && !oom; i++) {
        if (lines[i] == NULL)
            continue;
        struct curl_slist *more = curl->slist_append(headers, lines[i]);
        oom = more == NULL;
        headers = more ? more : headers;
    }
    if (oom) {
        snprintf(err, errlen, "%s %s: out of memory", rq->method, rq->url);
        curl->slist_free_all(headers);
        curl->easy_cleanup(h);
        return -1;
    }
    struct answer a = {
        .body = {.first_cap = rq->first_cap}, .max = rq->max_resp, .cancel = rq->cancel};
    char message[CURL_ERROR_SIZE] = "";
    curl->easy_setopt(h, CURLOPT_URL, rq->url);
    curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, rq->protocols);
    curl->easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, rq->timeout_ms);
    curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (rq->body) {
        curl->easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
        curl->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
    } else {
        curl->easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl->easy_setopt(h, CURLOPT_WRITEDATA, &a);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, message);
    if (rq->cancel != NULL) {
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
        snprintf(err, errlen, "%s%s%s%s", rq->url_in_errors ? rq->method : "",
                 rq->url_in_errors ? " " : "", rq->url_in_errors ? rq->url : "",
                 rq->url_in_errors ? ": " : "");
        size_t at = strlen(err);
        snprintf(err + at, errlen - at, "%s",
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
        snprintf(err, errlen, "%s %s: out of memory", rq->method, rq->url);
        return -1;
    }
    return 0;
}

int kube_http_post(const char *url, const char *header, const char *body, size_t len,
                   long timeout_ms, size_t max_resp, long *status, char **resp, char *err,
                   size_t errlen)
{
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        *resp = NULL;
        *status = 0;
        snprintf(err, errlen, "POST %s: not an http:// or https:// URL", url);
        return -1;
    }
    struct plain_request rq = {.method = "POST",
                               .url = url,
                               .protocols = "http,https",
                               .header1 = "Content-Type: application/json",
                               .header2 = header,
                               .body = body,
                               .body_len = len,
                               .timeout_ms = timeout_ms,
                               .max_resp = max_resp,
                               .first_cap = 1024,
                               .url_in_errors = true};
    return plain_perform(&rq, status, resp, NULL, err, errlen);
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
    char accept_line[160];
    snprintf(accept_line, sizeof accept_line, "Accept: %s", accept ? accept : "*/*");
    struct plain_request rq = {.method = "GET",
                               .url = url,
                               .protocols = "http",
                               .header1 = accept_line,
                               .timeout_ms = left_ms,
                               .max_resp = max_resp,
                               .first_cap = 16384,
                               .cancel = cancel};
    return plain_perform(&rq, status, resp, len, err, errlen);
}
