// Stored bodies compressed with zstd (libzstd): fast to read back (GB/s), and several-fold on the
// JSON and text services exchange. Each body is one frame that records its size, so reading it
// back allocates once and checks the size it gets, and the id of the dictionary it was
// compressed with (RFC 8878 §3.1.1.1.3), so it names what it needs to be read. The only
// importer of CZstd.
//
// Dictionaries are trained with zdict and kept digested: a decompression dictionary per id
// registered (its entropy tables built once, not per frame), a compression one made on first
// use.
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
    private let dictionaries = Locked<[UInt32: ZstdDictionary]>([:])

    public init(level: Int32 = ZstdCodec.defaultLevel) {
        self.level = level
    }

    public var coding: BodyCoding { .zstd }

    public func compress(_ body: [UInt8], dictionary id: UInt32?) -> [UInt8]? {
        guard !body.isEmpty else { return nil }
        var dictionary: ZstdDictionary?
        var digested: OpaquePointer?
        if let id {
            dictionary = dictionaries.withLock { $0[id] }
            digested = dictionary?.compressionDictionary(level: level)
            guard digested != nil else { return nil }
        }
        let context = compressors.take()
        defer { compressors.give(back: context) }
        let bound = ZSTD_compressBound(body.count)
        // Set on every call (they stay on the context): the level, a checksum of the content at
        // the frame's end (RFC 8878 §3.1.1: a frame decompressed into other bytes, with a damaged
        // dictionary say, is refused, not served), and the dictionary or none.
        guard ZSTD_isError(ZSTD_CCtx_setParameter(context.pointer, ZSTD_c_compressionLevel, level)) == 0,
            ZSTD_isError(ZSTD_CCtx_setParameter(context.pointer, ZSTD_c_checksumFlag, 1)) == 0,
            ZSTD_isError(ZSTD_CCtx_refCDict(context.pointer, digested)) == 0
        else { return nil }
        // The dictionary outlives its use here even if it is unregistered meanwhile.
        return withExtendedLifetime(dictionary) {
            try? [UInt8](unsafeUninitializedCapacity: bound) { buffer, count in
                let written = body.withUnsafeBytes { source in
                    ZSTD_compress2(context.pointer, buffer.baseAddress, bound, source.baseAddress, source.count)
                }
                guard ZSTD_isError(written) == 0 else { throw Failure() }
                count = written
            }
        }
    }

    public func decompress(_ stored: [UInt8], maxBytes: Int) -> [UInt8]? {
        let size = stored.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
        // Unknown (UInt64.max) and error (UInt64.max - 1) are both past any limit.
        guard size <= UInt64(max(0, maxBytes)) else { return nil }
        let expected = Int(size)
        guard expected > 0 else { return stored.count > 0 ? [] : nil }
        var dictionary: ZstdDictionary?
        if let id = dictionaryID(of: stored) {
            dictionary = dictionaries.withLock { $0[id] }
            guard dictionary != nil else { return nil }
        }
        let context = decompressors.take()
        defer { decompressors.give(back: context) }
        // The dictionary outlives its use here even if it is unregistered meanwhile.
        return withExtendedLifetime(dictionary) {
            try? [UInt8](unsafeUninitializedCapacity: expected) { buffer, count in
                let produced = stored.withUnsafeBytes { source in
                    if let dictionary {
                        ZSTD_decompress_usingDDict(
                            context.pointer, buffer.baseAddress, expected, source.baseAddress, source.count, dictionary.decompression)
                    } else {
                        ZSTD_decompressDCtx(context.pointer, buffer.baseAddress, expected, source.baseAddress, source.count)
                    }
                }
                guard ZSTD_isError(produced) == 0, produced == expected else { throw Failure() }
                count = produced
            }
        }
    }

    public func dictionaryID(of stored: [UInt8]) -> UInt32? {
        // 0: the frame names none (or is not a frame; decompress says so).
        let id = stored.withUnsafeBytes { ZSTD_getDictID_fromFrame($0.baseAddress, $0.count) }
        return id == 0 ? nil : UInt32(id)
    }

    public func register(_ dictionary: BodyDictionary) -> Bool {
        let named = dictionary.bytes.withUnsafeBytes { ZDICT_getDictID($0.baseAddress, $0.count) }
        guard named == dictionary.id else { return false }
        // An id names one dictionary: registered again only with the same bytes.
        if let registered = dictionaries.withLock({ $0[dictionary.id] }) { return registered.bytes == dictionary.bytes }
        guard let digested = ZstdDictionary(dictionary.bytes) else { return false }
        return dictionaries.withLock { registered in
            if let other = registered[dictionary.id] { return other.bytes == dictionary.bytes }
            registered[dictionary.id] = digested
            return true
        }
    }

    public func isRegistered(_ id: UInt32) -> Bool {
        dictionaries.withLock { $0[id] != nil }
    }

    public func unregister(_ id: UInt32) {
        _ = dictionaries.withLock { $0.removeValue(forKey: id) }
    }

    public func train(samples: [[UInt8]], capacity: Int, id: UInt32) -> [UInt8]? {
        guard !samples.isEmpty, capacity >= 256 else { return nil }
        let joined = samples.flatMap { $0 }
        let sizes = samples.map(\.count)
        guard
            var trained = try? [UInt8](
                unsafeUninitializedCapacity: capacity,
                initializingWith: { buffer, count in
                    let size = joined.withUnsafeBytes { source in
                        ZDICT_trainFromBuffer(buffer.baseAddress, capacity, source.baseAddress, sizes, UInt32(sizes.count))
                    }
                    guard ZDICT_isError(size) == 0 else { throw Failure() }
                    count = size
                })
        else { return nil }
        // A trained dictionary starts with its magic number and its id, little-endian (RFC 8878
        // §5); the id is the caller's, so ids stay unique across instances and versions.
        guard trained.count > 8 else { return nil }
        for byte in 0..<4 { trained[4 + byte] = UInt8(truncatingIfNeeded: id >> (8 * UInt32(byte))) }
        return trained
    }

    private struct Failure: Error {}
}

/// A zstd context of one kind, made and freed by its type. Sendable so that a pool can hand it
/// from thread to thread; one thread uses it at a time (ContextPool).
protocol ZstdContext: AnyObject, Sendable {
    init()
}

/// A registered dictionary, digested: the decompression form made at once, the compression one
/// (for the codec's one level) on first use. @unchecked Sendable: both forms are read-only once
/// made (zstd lets any number of threads use one at once), and the compression form is made
/// under its lock; the object is kept alive by every call that uses its pointers.
final class ZstdDictionary: @unchecked Sendable {
    let decompression: OpaquePointer
    let bytes: [UInt8]
    private let compression = Locked<UnsafeSendable?>(nil)

    /// The compression form's pointer, moved under the lock.
    struct UnsafeSendable: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    init?(_ bytes: [UInt8]) {
        guard let digested = bytes.withUnsafeBytes({ ZSTD_createDDict($0.baseAddress, $0.count) }) else { return nil }
        decompression = digested
        self.bytes = bytes
    }

    func compressionDictionary(level: Int32) -> OpaquePointer? {
        compression.withLock { made in
            if let made { return made.pointer }
            guard let digested = bytes.withUnsafeBytes({ ZSTD_createCDict($0.baseAddress, $0.count, level) }) else { return nil }
            made = UnsafeSendable(pointer: digested)
            return digested
        }
    }

    deinit {
        ZSTD_freeDDict(decompression)
        compression.withLock { made in
            if let made { ZSTD_freeCDict(made.pointer) }
        }
    }
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
