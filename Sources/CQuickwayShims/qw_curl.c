#include "qw_curl.h"

CURLcode qw_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
CURLcode qw_easy_setopt_ptr(CURL *h, CURLoption o, const void *v) { return curl_easy_setopt(h, o, v); }
CURLcode qw_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
CURLcode qw_easy_setopt_datafn(CURL *h, CURLoption o, curl_write_callback fn) { return curl_easy_setopt(h, o, fn); }
CURLcode qw_easy_setopt_xferinfofn(CURL *h, curl_xferinfo_callback fn) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, fn); }
CURLMcode qw_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
CURLMcode qw_multi_setopt_ptr(CURLM *m, CURLMoption o, void *v) { return curl_multi_setopt(m, o, v); }
CURLMcode qw_multi_setopt_socketfn(CURLM *m, curl_socket_callback fn) { return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, fn); }
CURLMcode qw_multi_setopt_timerfn(CURLM *m, curl_multi_timer_callback fn) { return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, fn); }
CURLcode qw_easy_getinfo_long(CURL *h, CURLINFO i, long *out) { return curl_easy_getinfo(h, i, out); }
CURLcode qw_easy_getinfo_ptr(CURL *h, CURLINFO i, void **out) { return curl_easy_getinfo(h, i, out); }
CURLcode qw_easy_getinfo_double(CURL *h, CURLINFO i, double *out) { return curl_easy_getinfo(h, i, out); }
CURLcode qw_easy_getinfo_socket(CURL *h, CURLINFO i, curl_socket_t *out) { return curl_easy_getinfo(h, i, out); }
CURLcode qw_easy_setopt_closesocketfn(CURL *h, curl_closesocket_callback fn, void *data) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, fn);
    if (rc != CURLE_OK) return rc;
    return curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, data);
}

#include <unistd.h>
// Closes the socket unless *keep is set: then the application has taken it over.
static int qw_close_unless_kept(void *clientp, curl_socket_t s) {
    const int *keep = clientp;
    if (keep && *keep) return 0;
    return close(s);
}
CURLcode qw_easy_keep_socket_when_flagged(CURL *h, int *keep) {
    CURLcode rc = curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, qw_close_unless_kept);
    if (rc != CURLE_OK) return rc;
    return curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, keep);
}

#include <errno.h>
#include <sys/socket.h>
// Written and read on the worker thread that drives the transfer (curl calls back on it).
static __thread int qw_socket_failure;
static curl_socket_t qw_open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a) {
    (void)clientp; (void)purpose;
    curl_socket_t s = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (s == CURL_SOCKET_BAD) qw_socket_failure = errno;
    return s;
}
CURLcode qw_easy_note_socket_failures(CURL *h) {
    return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, qw_open_socket);
}
int qw_take_socket_failure(void) {
    int e = qw_socket_failure;
    qw_socket_failure = 0;
    return e;
}
