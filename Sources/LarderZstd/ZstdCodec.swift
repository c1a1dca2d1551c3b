// Stored bodies compressed with zstd (libzstd): fast to read back (GB/s), and several-fold on the
// JSON and text services exchange. Each body is one frame that records its size, so reading it
// back allocates once and checks the size it gets. The only importer of CZstd.
//
// Contexts are costly to make (zstd's one-shot calls make one per call, some hundreds of KB), so
// each kind is kept in a small pool and reused: a hit that reads a compressed body takes a
// decompression context, uses it and gives it back.

import CZstd
public import LarderEngine
import LarderSync

public final class ZstdCodec: BodyCodec {
    /// zstd's default level: most of the ratio of the higher ones at a fraction of their time.
    public static let defaultLevel: Int32 = 3

    private let level: Int32
    private let compressors = ContextPool<Compression>()
    private let decompressors = ContextPool<Decompression>()

    public init(level: Int32 = ZstdCodec.defaultLevel) {
        self.level = level
    }

    public var coding: BodyCoding { .zstd }

    public func compress(_ body: [UInt8]) -> [UInt8]? {
        guard !body.isEmpty else { return nil }
        let context = compressors.take()
        defer { compressors.give(back: context) }
        let bound = ZSTD_compressBound(body.count)
        let level = level
        return try? [UInt8](unsafeUninitializedCapacity: bound) { buffer, count in
            let written = body.withUnsafeBytes { source in
                ZSTD_compressCCtx(context.pointer, buffer.baseAddress, bound, source.baseAddress, source.count, level)
            }
            guard ZSTD_isError(written) == 0 else { throw Failure() }
            count = written
        }
    }

    public func decompress(_ stored: [UInt8], maxBytes: Int) -> [UInt8]? {
        let size = stored.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
        // Unknown (UInt64.max) and error (UInt64.max - 1) are both past any limit.
        guard size <= UInt64(max(0, maxBytes)) else { return nil }
        let expected = Int(size)
        guard expected > 0 else { return stored.count > 0 ? [] : nil }
        let context = decompressors.take()
        defer { decompressors.give(back: context) }
        return try? [UInt8](unsafeUninitializedCapacity: expected) { buffer, count in
            let produced = stored.withUnsafeBytes { source in
                ZSTD_decompressDCtx(context.pointer, buffer.baseAddress, expected, source.baseAddress, source.count)
            }
            guard ZSTD_isError(produced) == 0, produced == expected else { throw Failure() }
            count = produced
        }
    }

    private struct Failure: Error {}
}

/// A zstd context of one kind, made and freed by its type. Sendable so that a pool can hand it
/// from thread to thread; one thread uses it at a time (ContextPool).
protocol ZstdContext: AnyObject, Sendable {
    init()
}

final class Compression: ZstdContext, @unchecked Sendable {
    let pointer: OpaquePointer
    init() { pointer = ZSTD_createCCtx() }
    deinit { ZSTD_freeCCtx(pointer) }
}

final class Decompression: ZstdContext, @unchecked Sendable {
    let pointer: OpaquePointer
    init() { pointer = ZSTD_createDCtx() }
    deinit { ZSTD_freeDCtx(pointer) }
}

/// Contexts not in use; one is made when none is idle, and at most `kept` stay idle. A context
/// is used by one thread at a time: taken out under the lock, given back when done.
final class ContextPool<Context: ZstdContext>: Sendable {
    private let idle = Locked<[Context]>([])
    private let kept = 16

    func take() -> Context {
        idle.withLock { $0.popLast() } ?? Context()
    }

    func give(back context: Context) {
        idle.withLock { contexts in
            if contexts.count < kept { contexts.append(context) }
        }
    }
}
