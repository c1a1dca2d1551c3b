#ifndef LARDER_CMALLOC_SHIM_H
#define LARDER_CMALLOC_SHIM_H
// glibc's malloc tuning and statistics (mallopt, malloc_trim, mallinfo2), which the Glibc
// module does not export.
#include <malloc.h>
#endif
