#ifndef QUICKWAY_CPCRE2_SHIM_H
#define QUICKWAY_CPCRE2_SHIM_H
// The 8-bit library (paths are bytes). pcre2.h names its functions through macros
// (pcre2_compile is pcre2_compile_8), which Swift does not import: Swift calls the
// suffixed names.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif
