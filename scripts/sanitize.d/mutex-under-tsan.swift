// Why Larder's locks are LarderSync.Locked rather than Synchronization.Mutex directly: Swift's
// Mutex on Linux (a futex, in the uninstrumented standard library) is invisible to
// ThreadSanitizer, which then reports every access guarded by one as a race. This program is
// correct — four threads and the main thread touch a dictionary only inside Mutex.withLock —
// and TSan still reports a "Swift access race":
//   swiftc -sanitize=thread -Onone scripts/sanitize.d/mutex-under-tsan.swift -o /tmp/m && /tmp/m
// (seen with Swift 6.3.1 on Debian 12). Built with -DLARDER_TSAN (scripts/sanitize thread),
// Locked is a pthread mutex, which TSan intercepts; the same program with it reports nothing.
import Foundation
import Synchronization

final class Box: Sendable { let state = Mutex<[Int: [Int]]>([:]) }
let box = Box()
let threads = (0..<4).map { t in
    Thread {
        for i in 0..<20000 {
            box.state.withLock {
                $0[i % 64, default: []].append(t)
                if $0[i % 64]!.count > 8 { $0[i % 64] = [] }
            }
        }
    }
}
threads.forEach { $0.start() }
for i in 0..<20000 { _ = box.state.withLock { $0.isEmpty ? nil : $0[i % 64] } }
sleep(2)
print("done")
