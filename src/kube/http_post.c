/* http_post.c -- one plain HTTP POST outside the API server (kube.h):
 * the extender's bind forwarding. A fresh libcurl handle per call, so any
 * thread may call it while others use the API clients. */
#include "curl_api.h"
#include "kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

struct answer {
    struct buf body;
    size_t max;
    bool too_large;
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

int kube_http_post(const char *url, const char *header, const char *body, size_t len,
                   long timeout_ms, size_t max_resp, long *status, char **resp, char *err,
                   size_t errlen)
{
    *resp = NULL;
    *status = 0;
    const struct kube_curl *curl = kube_curl_get(err, errlen);
    if (curl == NULL)
        return -1;
    CURL *h = curl->easy_init();
    struct curl_slist *headers = curl->slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *more = headers && header ? curl->slist_append(headers, header) : headers;
    if (h == NULL || more == NULL) {
        snprintf(err, errlen, "POST %s: out of memory", url);
        curl->slist_free_all(headers);
        curl->easy_cleanup(h);
        return -1;
    }
    headers = more;
    struct answer a = {.body = {.first_cap = 1024}, .max = max_resp};
    char message[CURL_ERROR_SIZE] = "";
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        snprintf(err, errlen, "POST %s: not an http:// or https:// URL", url);
        curl->slist_free_all(headers);
        curl->easy_cleanup(h);
        return -1;
    }
    curl->easy_setopt(h, CURLOPT_URL, url);
    curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for timeouts */
    curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl->easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl->easy_setopt(h, CURLOPT_WRITEDATA, &a);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, message);
    CURLcode code = curl->easy_perform(h);
    curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl->easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl->slist_free_all(headers);
    curl->easy_cleanup(h);
    if (code != CURLE_OK) {
        snprintf(err, errlen, "POST %s: %s", url,
                 a.too_large  ? "answer too large"
                 : message[0] ? message
                              : curl->easy_strerror(code));
        free(a.body.data);
        *status = 0;
        return -1;
    }
    *resp = a.body.data ? buf_take(&a.body, NULL) : strdup(""); /* a buf holds its NUL */
    if (*resp == NULL) {
        snprintf(err, errlen, "POST %s: out of memory", url);
        return -1;
    }
    return 0;
}
