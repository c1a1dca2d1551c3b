#ifndef LARDER_CMALLOC_SHIM_H
#define LARDER_CMALLOC_SHIM_H
// glibc's malloc tuning (mallopt, malloc_trim), which the Glibc module does not export.
#include <malloc.h>
#endif
