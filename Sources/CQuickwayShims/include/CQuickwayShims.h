#include "qw_curl.h"
#include "qw_atomic.h"
#include "qw_socket.h"
#include "qw_crypto.h"
