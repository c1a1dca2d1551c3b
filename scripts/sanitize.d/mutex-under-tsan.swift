// Why ThreadSanitizer is not clean here: Swift's Synchronization.Mutex on Linux (a futex, in
// the uninstrumented standard library) is invisible to TSan, which then reports every access
// guarded by one as a race. This program is correct — four threads and the main thread touch a
// dictionary only inside Mutex.withLock — and TSan still reports a "Swift access race":
//   swiftc -sanitize=thread -Onone scripts/sanitize.d/mutex-under-tsan.swift -o /tmp/m && /tmp/m
// (seen with Swift 6.3.1 on Debian 12). Larder guards its shared state with Mutex, so its TSan
// run stops at the first such report; the reports cannot be suppressed by frame, since the
// closures passed to withLock appear without a Mutex frame above them.
import Synchronization
import Foundation
final class Box: Sendable { let state = Mutex<[Int: [Int]]>([:]) }
let box = Box()
let threads = (0..<4).map { t in Thread { for i in 0..<20000 { box.state.withLock { $0[i % 64, default: []].append(t) ; if $0[i % 64]!.count > 8 { $0[i % 64] = [] } } } } }
threads.forEach { $0.start() }
for i in 0..<20000 { _ = box.state.withLock { $0.isEmpty ? nil : $0[i % 64] } }
sleep(2)
print("done")
