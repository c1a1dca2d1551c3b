// What glibc's allocator has handed out in this process, for tests that measure memory.

import CMalloc

/// Bytes in use in every arena plus separately mapped blocks; 0 under a sanitizer, whose
/// allocator replaces glibc's.
public func glibcHeapInUse() -> Int {
    let info = mallinfo2()
    return Int(info.uordblks) + Int(info.hblkhd)
}
