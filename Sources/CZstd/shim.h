#ifndef QUICKWAY_CZSTD_SHIM_H
#define QUICKWAY_CZSTD_SHIM_H
#include <zstd.h>
#endif
