#ifndef QUICKWAY_QW_CURL_H
#define QUICKWAY_QW_CURL_H
// Typed wrappers for libcurl's variadic functions (curl_easy_setopt,
// curl_multi_setopt, curl_easy_getinfo), which Swift cannot call directly.
// One function per argument kind; each just forwards to libcurl.
#include <curl/curl.h>

CURLcode qw_easy_setopt_long(CURL *h, CURLoption o, long v);
CURLcode qw_easy_setopt_ptr(CURL *h, CURLoption o, const void *v);
CURLcode qw_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v);
CURLcode qw_easy_setopt_datafn(CURL *h, CURLoption o, curl_write_callback fn);
CURLcode qw_easy_setopt_xferinfofn(CURL *h, curl_xferinfo_callback fn);
CURLMcode qw_multi_setopt_long(CURLM *m, CURLMoption o, long v);
CURLMcode qw_multi_setopt_ptr(CURLM *m, CURLMoption o, void *v);
CURLMcode qw_multi_setopt_socketfn(CURLM *m, curl_socket_callback fn);
CURLMcode qw_multi_setopt_timerfn(CURLM *m, curl_multi_timer_callback fn);
CURLcode qw_easy_getinfo_long(CURL *h, CURLINFO i, long *out);
CURLcode qw_easy_getinfo_ptr(CURL *h, CURLINFO i, void **out);
CURLcode qw_easy_getinfo_double(CURL *h, CURLINFO i, double *out);
CURLcode qw_easy_getinfo_socket(CURL *h, CURLINFO i, curl_socket_t *out);
// CURLOPT_CLOSESOCKETFUNCTION and its CURLOPT_CLOSESOCKETDATA (CurlIdleWatch).
CURLcode qw_easy_setopt_closesocketfn(CURL *h, curl_closesocket_callback fn, void *data);
// CURLOPT_CLOSESOCKETFUNCTION that leaves the socket open once *keep is non-zero: a
// CONNECT_ONLY connection's socket is then handed over to the caller, who closes it.
CURLcode qw_easy_keep_socket_when_flagged(CURL *h, int *keep);
// Makes curl open its sockets through a function that remembers, per thread, why the
// last socket() failed (EMFILE, ENFILE: the gateway, not the backend, is out of room).
CURLcode qw_easy_note_socket_failures(CURL *h);
// The errno of a socket() failure on this thread since the last call (0: none), cleared.
int qw_take_socket_failure(void);
#endif
