import CMicroHTTPD
import LarderSync

/// A response body written piece by piece, from any thread, and sent as it comes (chunked
/// transfer coding). When nothing is buffered the connection is suspended in libmicrohttpd's
/// content reader (it would otherwise poll the reader in a busy loop) and resumed by the next
/// `write` or by `finish`.
///
/// The pieces are kept as written and handed out from the front, so sending costs the bytes
/// sent, not the bytes still waiting (a buffer that dropped its front on every read was
/// quadratic in the body's size). A writer that must not run ahead of the client
/// asks to be told when the socket has taken what it wrote (`write(_:taken:)`).
public final class HTTPResponseStream: Sendable {
    private struct State {
        /// Written and not yet handed to libmicrohttpd: `pieces[head...]`, the first of them
        /// from `offset` on.
        var pieces: [[UInt8]] = []
        var head = 0
        var offset = 0
        var finished = false
        /// Cut short: the server stopped while the stream waited for bytes.
        var cut = false
        /// The connection is over (the client went away, or the body was sent): writes are
        /// dropped and nothing is kept.
        var closed = false
        var suspended = false
        var connection: RequestContext.ConnectionHandle?
        /// Called once everything written before them has been taken (or the connection ended).
        var whenTaken: [@Sendable () -> Void] = []

        var isEmpty: Bool { head == pieces.count }

        mutating func dropTaken() {
            if head == pieces.count {
                pieces.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 32, head * 2 >= pieces.count {
                // Amortised: each piece is moved at most once more.
                pieces.removeFirst(head)
                head = 0
            }
        }
    }
    private let state = Locked(State())

    public init() {}

    public func write(_ bytes: [UInt8]) {
        write(bytes, taken: nil)
    }

    /// Writes `bytes`; `taken` is called once, from another thread or at once, when libmicrohttpd
    /// has taken them and everything before them (or the connection has ended and they never
    /// will be): what a writer waits for to hold no more than one piece beyond the socket.
    public func write(_ bytes: [UInt8], taken: (@Sendable () -> Void)?) {
        let now = state.withLock { state -> Bool in
            precondition(!state.finished, "write after finish")
            guard !state.closed else { return true }
            if !bytes.isEmpty {
                state.pieces.append(bytes)
                resumeIfSuspended(&state)
            }
            guard let taken else { return false }
            if state.isEmpty { return true }
            state.whenTaken.append(taken)
            return false
        }
        if now { taken?() }
    }

    /// The connection is over: nothing written from now on will be sent.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Ends the body; call once, after the last `write`.
    public func finish() {
        state.withLock { state in
            state.finished = true
            resumeIfSuspended(&state)
        }
    }

    private func resumeIfSuspended(_ state: inout State) {
        if state.suspended, let connection = state.connection {
            state.suspended = false
            connection.suspensions.remove(self)
            connection.resume()
        }
    }

    /// The server is stopping while the stream waits for bytes: the body ends without its last
    /// chunk, so the client sees it cut short (SuspendedConnections).
    private func cutAtShutdown() {
        state.withLock { state in
            // Finished meanwhile: `finish` resumed it, and the body ends whole.
            guard !state.finished else { return }
            state.cut = true
            resumeIfSuspended(&state)
        }
    }

    fileprivate func attach(_ connection: RequestContext.ConnectionHandle) {
        state.withLock { $0.connection = connection }
    }

    /// libmicrohttpd let go of the response: the connection is over, sent or not. What is
    /// still buffered will never be sent, so it is let go of, and writers waiting for the
    /// socket are released.
    fileprivate func close() {
        let waiting = state.withLock { state -> [@Sendable () -> Void] in
            state.closed = true
            state.connection = nil
            state.pieces = []
            state.head = 0
            state.offset = 0
            defer { state.whenTaken = [] }
            return state.whenTaken
        }
        for taken in waiting { taken() }
    }

    /// libmicrohttpd asks for up to `max` bytes: some, the end, or (suspending) none yet.
    fileprivate func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        var waiting: [@Sendable () -> Void] = []
        let result = state.withLock { state -> Int in
            var count = 0
            while count < max, !state.isEmpty {
                let piece = state.pieces[state.head]
                let part = min(max - count, piece.count - state.offset)
                piece.withUnsafeBytes { bytes in
                    (UnsafeMutableRawPointer(buffer) + count).copyMemory(from: bytes.baseAddress! + state.offset, byteCount: part)
                }
                count += part
                state.offset += part
                if state.offset == piece.count {
                    state.pieces[state.head] = []
                    state.head += 1
                    state.offset = 0
                }
            }
            if count > 0 {
                if state.isEmpty {
                    waiting = state.whenTaken
                    state.whenTaken = []
                }
                state.dropTaken()
                return count
            }
            if state.cut { return larder_mhd_end_with_error() }
            if state.finished { return larder_mhd_end_of_stream() }
            guard let connection = state.connection else { return 0 }
            state.suspended = true
            MHD_suspend_connection(connection.pointer)
            connection.suspensions.add(self) { [weak self] _ in self?.cutAtShutdown() }
            return 0
        }
        for taken in waiting { taken() }
        return result
    }

    /// A libmicrohttpd response whose body is read from this stream as it is written (chunked:
    /// its size is unknown), on `connection`. libmicrohttpd holds the stream until it lets go
    /// of the response (`streamReleased`).
    func makeResponse(on connection: RequestContext.ConnectionHandle) -> OpaquePointer? {
        attach(connection)
        return MHD_create_response_from_callback(
            larder_mhd_size_unknown(), 16 << 10, streamReader,
            Unmanaged.passRetained(self).toOpaque(), streamReleased)
    }
}

private let streamReader: MHD_ContentReaderCallback = { context, _, buffer, max in
    guard let context, let buffer else { return larder_mhd_end_of_stream() }
    let stream = Unmanaged<HTTPResponseStream>.fromOpaque(context).takeUnretainedValue()
    return stream.read(into: buffer, max: max)
}

private let streamReleased: MHD_ContentReaderFreeCallback = { context in
    guard let context else { return }
    let stream = Unmanaged<HTTPResponseStream>.fromOpaque(context)
    stream.takeUnretainedValue().close()
    stream.release()
}
