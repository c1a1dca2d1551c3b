// Names for Larder's own threads, as `top -H`, perf and /proc show them.

import Foundation

/// Names the calling thread, for the operating system and for Foundation.
///
/// swift-corelibs-foundation names the OS thread only when the name is set on the running
/// thread (a name given before `start()` never reaches it), and even then not always: it checks
/// the thread's handle, which the creating thread stores only after the new one has started. In
/// a test of 200 threads named from inside, 7 kept the process's name. So the kernel's name (15
/// bytes at most) is written here directly, as pthread_setname_np does.
public func nameCurrentThread(_ name: String) {
    Thread.current.name = name
    let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    close(descriptor)
}
