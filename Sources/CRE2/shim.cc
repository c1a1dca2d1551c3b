// The C face of RE2 declared in include/CRE2.h.
#include "CRE2.h"

#include <re2/re2.h>

#include <cstring>
#include <new>

struct larder_re2 {
    re2::RE2 compiled;
    larder_re2(re2::StringPiece pattern, const re2::RE2::Options &options) : compiled(pattern, options) {}
};

extern "C" larder_re2 *larder_re2_compile(const char *pattern, size_t length, int64_t max_memory, char *error,
                                          size_t error_capacity) {
    re2::RE2::Options options;
    options.set_encoding(re2::RE2::Options::EncodingUTF8);
    options.set_log_errors(false);
    options.set_never_capture(true);
    options.set_max_mem(max_memory);
    larder_re2 *made = new (std::nothrow) larder_re2(re2::StringPiece(pattern == nullptr ? "" : pattern, length), options);
    if (made == nullptr) {
        if (error_capacity > 0) std::strncpy(error, "out of memory", error_capacity - 1), error[error_capacity - 1] = 0;
        return nullptr;
    }
    if (!made->compiled.ok()) {
        if (error_capacity > 0) {
            std::strncpy(error, made->compiled.error().c_str(), error_capacity - 1);
            error[error_capacity - 1] = 0;
        }
        delete made;
        return nullptr;
    }
    return made;
}

extern "C" int larder_re2_search(const larder_re2 *pattern, const char *text, size_t length) {
    return re2::RE2::PartialMatch(re2::StringPiece(text == nullptr ? "" : text, length), pattern->compiled) ? 1 : 0;
}

extern "C" int larder_re2_program_size(const larder_re2 *pattern) { return pattern->compiled.ProgramSize(); }

extern "C" void larder_re2_free(larder_re2 *pattern) { delete pattern; }
