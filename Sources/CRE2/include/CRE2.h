#ifndef LARDER_CRE2_H
#define LARDER_CRE2_H
// A C face for RE2 (Debian libre2-dev), whose API is C++: a pattern compiled once, then searched
// in time linear in the text (RE2 never backtracks). Only LarderRE2 imports this module.
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct larder_re2 larder_re2;

/// Compiles a UTF-8 pattern (RE2 syntax) whose program may take at most `max_memory` bytes.
/// Returns NULL when it does not compile, with RE2's reason (truncated, NUL-terminated) in
/// `error` when `error_capacity` > 0.
larder_re2 *_Nullable larder_re2_compile(const char *_Nullable pattern, size_t length, int64_t max_memory,
                                         char *_Nullable error, size_t error_capacity);

/// 1 when the pattern matches somewhere in `text` (an unanchored search), 0 when not.
int larder_re2_search(const larder_re2 *_Nonnull pattern, const char *_Nullable text, size_t length);

/// The compiled program's size in instructions: a search costs at most this times the text's bytes.
int larder_re2_program_size(const larder_re2 *_Nonnull pattern);

void larder_re2_free(larder_re2 *_Nullable pattern);

#ifdef __cplusplus
}
#endif
#endif
