// An open file descriptor with exactly one owner at a time: a stored body opened for sending
// (the store opens it, the HTTP server sends it with sendfile). Closed when its owner lets go,
// unless the server took it (libmicrohttpd closes what it was given), so a response that is
// never sent (its client gone) does not leak the descriptor.

import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

public final class OwnedDescriptor: Sendable {
    private let descriptor: Locked<Int32?>
    /// The file's size when it was opened.
    public let size: Int

    public init(_ descriptor: Int32, size: Int) {
        self.descriptor = Locked(descriptor)
        self.size = size
    }

    /// Hands the descriptor over (once): the taker closes it.
    public func take() -> Int32? {
        descriptor.withLock { value in
            defer { value = nil }
            return value
        }
    }

    deinit {
        if let descriptor = descriptor.withLock({ $0 }) { close(descriptor) }
    }
}
