#ifndef LARDER_CXXHASH_SHIM_H
#define LARDER_CXXHASH_SHIM_H
// XXH3 (libxxhash): the stored bodies' checksum, fast enough to check on every read.
#include <xxhash.h>
#endif
