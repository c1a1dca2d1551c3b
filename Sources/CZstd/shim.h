#ifndef LARDER_CZSTD_SHIM_H
#define LARDER_CZSTD_SHIM_H
// zstd (libzstd): stored bodies compressed at rest.
#include <zstd.h>
#endif
