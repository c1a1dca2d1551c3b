#ifndef LARDER_CZSTD_SHIM_H
#define LARDER_CZSTD_SHIM_H
// zstd (libzstd): stored bodies compressed at rest, and the dictionaries trained for them.
#include <zstd.h>
#include <zdict.h>
#endif
