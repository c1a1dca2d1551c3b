// The lock Larder's shared state lives behind. Normally it is Synchronization.Mutex itself
// (a typealias: no cost). Built with -DLARDER_TSAN (scripts/sanitize thread), it is a
// pthread mutex instead: Swift's Mutex on Linux is a futex inside the uninstrumented standard
// library, invisible to ThreadSanitizer, which then reports every access it guards as a race
// (scripts/sanitize.d/mutex-under-tsan.swift shows it on a ten-line correct program).
// ThreadSanitizer intercepts pthread_mutex_lock and _unlock, so with this lock it sees the
// happens-before edges the futex hides, and what it still reports is real.

@_exported import Synchronization

#if LARDER_TSAN
    import Glibc

    public final class Locked<Value: ~Copyable>: @unchecked Sendable {
        private let mutex: UnsafeMutablePointer<pthread_mutex_t>
        private var value: Value

        public init(_ initialValue: consuming sending Value) {
            mutex = .allocate(capacity: 1)
            pthread_mutex_init(mutex, nil)
            value = initialValue
        }

        deinit {
            pthread_mutex_destroy(mutex)
            mutex.deallocate()
        }

        public func withLock<Result: ~Copyable, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E)
            -> sending Result
        {
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&value)
        }

        /// As Mutex's: runs `body` if the lock is free, else returns nil at once.
        public func withLockIfAvailable<Result: ~Copyable, E: Error>(
            _ body: (inout sending Value) throws(E) -> sending Result
        ) throws(E) -> sending Result? {
            guard pthread_mutex_trylock(mutex) == 0 else { return nil }
            defer { pthread_mutex_unlock(mutex) }
            return try body(&value)
        }
    }
#else
    public typealias Locked<Value: ~Copyable> = Mutex<Value>
#endif
