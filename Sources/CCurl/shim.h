#ifndef QUICKWAY_CCURL_SHIM_H
#define QUICKWAY_CCURL_SHIM_H
#include <curl/curl.h>
#endif
