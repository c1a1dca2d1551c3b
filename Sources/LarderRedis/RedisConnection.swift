// Blocking Redis connections through hiredis (the only importer of CHiredis), and a small pool.
// Every command has a timeout (the socket's); commands sent together are pipelined (one write,
// then the replies in order), so a hit that needs several commands is still one round trip.

import CHiredis
import Foundation
import LarderCore
import LarderSync

/// A reply, copied out of hiredis's reply objects.
public enum RedisValue: Sendable, Equatable {
    case bytes([UInt8])
    case integer(Int64)
    case array([RedisValue])
    case null
    case status(String)
    case error(String)

    public var bytes: [UInt8]? { if case .bytes(let value) = self { value } else { nil } }
    public var string: String? {
        switch self {
        case .bytes(let value): String(decoding: value, as: UTF8.self)
        case .status(let value): value
        default: nil
        }
    }
    public var integer: Int64? { if case .integer(let value) = self { value } else { nil } }
    public var array: [RedisValue] { if case .array(let value) = self { value } else { [] } }
}

public struct RedisError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Where the store is: `redis://[user:password@]host:port[/db]`.
public struct RedisAddress: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var user: String?
    public var password: String?
    public var database: Int

    /// Parses a `redis://` URL; `rediss://` is refused (Debian's hiredis 0.14 has no TLS).
    public init(url: String) throws(RedisError) {
        if url.hasPrefix("rediss://") {
            throw RedisError(
                "rediss:// (TLS) is not supported: Debian's hiredis 0.14 has no TLS; use redis:// on a trusted network or a TLS tunnel")
        }
        guard url.hasPrefix("redis://"), let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            throw RedisError("'\(AddressRedaction.redacted(url))' is not redis://[user:password@]host:port[/db]")
        }
        self.host = host
        self.port = components.port ?? 6379
        self.user = components.user.flatMap { $0.isEmpty ? nil : $0.removingPercentEncoding }
        self.password = components.password?.removingPercentEncoding
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        guard let database = path.isEmpty ? 0 : Int(path), database >= 0 else {
            throw RedisError("the database in '\(AddressRedaction.redacted(url))' must be a number")
        }
        self.database = database
    }

    /// host:port, for messages (never the password).
    public var display: String { "\(host):\(port)" }
}

/// One connection. Used by one thread at a time (the pool hands it out).
public final class RedisConnection: @unchecked Sendable {
    private let context: UnsafeMutablePointer<redisContext>

    public init(_ address: RedisAddress, timeoutMs: Int) throws(RedisError) {
        let timeout = timeval(tv_sec: timeoutMs / 1000, tv_usec: Int((timeoutMs % 1000) * 1000))
        guard let context = redisConnectWithTimeout(address.host, Int32(address.port), timeout) else {
            throw RedisError("cannot allocate a Redis connection")
        }
        if larder_context_error(context) != 0 {
            let message = String(cString: larder_context_errstr(context))
            redisFree(context)
            throw RedisError("cannot connect to Redis at \(address.display): \(message)")
        }
        redisSetTimeout(context, timeout)
        self.context = context
        if let password = address.password {
            let reply = try command(address.user.map { ["AUTH", $0, password] } ?? ["AUTH", password])
            if case .error(let message) = reply { throw RedisError("Redis refused the credentials: \(message)") }
        }
        if address.database != 0, case .error(let message) = try command(["SELECT", String(address.database)]) {
            throw RedisError("Redis refused database \(address.database): \(message)")
        }
    }

    deinit { redisFree(context) }

    /// One command, its reply (a Redis error reply is returned as `.error`, not thrown).
    public func command(_ arguments: [String]) throws(RedisError) -> RedisValue {
        try pipeline([arguments.map { Array($0.utf8) }])[0]
    }

    /// Sends every command, then reads every reply, in order. Throws when the connection
    /// fails (timeout, reset): the connection is then unusable.
    public func pipeline(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisValue] {
        for arguments in commands {
            var lengths = arguments.map { $0.count }
            // hiredis copies the arguments into its output buffer at once.
            let pointers = arguments.map { argument -> UnsafeMutablePointer<CChar> in
                let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, argument.count))
                argument.withUnsafeBytes { bytes in
                    if let base = bytes.baseAddress { UnsafeMutableRawPointer(pointer).copyMemory(from: base, byteCount: argument.count) }
                }
                return pointer
            }
            defer { pointers.forEach { $0.deallocate() } }
            var constant = pointers.map { UnsafePointer<CChar>?($0) }
            let status = constant.withUnsafeMutableBufferPointer { argv in
                lengths.withUnsafeMutableBufferPointer { argvlen in
                    redisAppendCommandArgv(context, Int32(arguments.count), argv.baseAddress, argvlen.baseAddress)
                }
            }
            guard status == larder_redis_ok() else { throw failure() }
        }
        var replies: [RedisValue] = []
        replies.reserveCapacity(commands.count)
        for _ in commands {
            var raw: UnsafeMutableRawPointer?
            guard redisGetReply(context, &raw) == larder_redis_ok(), let raw else { throw failure() }
            let reply = raw.assumingMemoryBound(to: redisReply.self)
            replies.append(Self.value(of: reply))
            freeReplyObject(raw)
        }
        return replies
    }

    /// Reads the next message pushed to this connection (pub/sub); throws on timeout or failure.
    public func nextMessage() throws(RedisError) -> RedisValue {
        var raw: UnsafeMutableRawPointer?
        guard redisGetReply(context, &raw) == larder_redis_ok(), let raw else { throw failure() }
        defer { freeReplyObject(raw) }
        return Self.value(of: raw.assumingMemoryBound(to: redisReply.self))
    }

    /// Sends one command without reading its reply (SUBSCRIBE).
    public func send(_ arguments: [String]) throws(RedisError) {
        var raw: UnsafeMutableRawPointer?
        let pointers = arguments.map { strdup($0)! }
        defer { pointers.forEach { free($0) } }
        var constant = pointers.map { UnsafePointer<CChar>?($0) }
        var lengths = arguments.map { $0.utf8.count }
        let status = constant.withUnsafeMutableBufferPointer { argv in
            lengths.withUnsafeMutableBufferPointer { argvlen in
                redisAppendCommandArgv(context, Int32(arguments.count), argv.baseAddress, argvlen.baseAddress)
            }
        }
        guard status == larder_redis_ok() else { throw failure() }
        // Flush the output buffer by reading the subscription's confirmation.
        guard redisGetReply(context, &raw) == larder_redis_ok(), let raw else { throw failure() }
        freeReplyObject(raw)
    }

    /// Makes a read blocked on this connection in another thread fail at once.
    public func interrupt() { larder_context_shutdown(context) }

    /// Changes the socket timeout (the subscriber waits longer than a command may).
    public func setTimeout(milliseconds: Int) {
        redisSetTimeout(context, timeval(tv_sec: milliseconds / 1000, tv_usec: Int((milliseconds % 1000) * 1000)))
    }

    private func failure() -> RedisError {
        RedisError(larder_context_error(context) == 0 ? "Redis connection failed" : String(cString: larder_context_errstr(context)))
    }

    private static func value(of reply: UnsafePointer<redisReply>) -> RedisValue {
        switch Int(larder_reply_type(reply)) { // the LARDER_REPLY_* constants import as Int
        case LARDER_REPLY_STRING:
            return .bytes(bytes(reply))
        case LARDER_REPLY_INTEGER:
            return .integer(larder_reply_integer(reply))
        case LARDER_REPLY_ARRAY:
            return .array((0..<larder_reply_elements(reply)).map { value(of: larder_reply_element(reply, $0)) })
        case LARDER_REPLY_STATUS:
            return .status(String(decoding: bytes(reply), as: UTF8.self))
        case LARDER_REPLY_ERROR:
            return .error(String(decoding: bytes(reply), as: UTF8.self))
        default:
            return .null
        }
    }

    private static func bytes(_ reply: UnsafePointer<redisReply>) -> [UInt8] {
        guard let start = larder_reply_str(reply) else { return [] }
        return start.withMemoryRebound(to: UInt8.self, capacity: larder_reply_len(reply)) {
            Array(UnsafeBufferPointer(start: $0, count: larder_reply_len(reply)))
        }
    }
}

/// Idle connections kept for reuse; a connection that failed is dropped, not returned. After a
/// failure to connect, new connections are not tried for `retryAfter` seconds: requests then
/// fail at once (a miss) instead of each waiting for a connect timeout.
public final class RedisPool: Sendable {
    public let address: RedisAddress
    private let timeoutMs: Int
    private let idle = Locked<[RedisConnection]>([])
    private let maxIdle: Int
    private let blockedUntil = Atomic<UInt64>(0)
    private let retryAfterNanoseconds: UInt64
    /// Operations that failed since start (a metric), and whether the last one did.
    let failures = Atomic<Int>(0)
    public var failureCount: Int { failures.load(ordering: .relaxed) }
    private let failing = Atomic<Bool>(false)

    public init(address: RedisAddress, timeoutMs: Int, maxIdle: Int = 32, retryAfterMs: Int = 1000) {
        self.address = address
        self.timeoutMs = timeoutMs
        self.maxIdle = maxIdle
        self.retryAfterNanoseconds = UInt64(retryAfterMs) * 1_000_000
    }

    /// Whether Redis answered the last operation.
    public var healthy: Bool { !failing.load(ordering: .relaxed) }

    /// Runs `body` on a pooled connection; a failure drops the connection and is rethrown.
    public func with<T>(_ body: (RedisConnection) throws(RedisError) -> T) throws(RedisError) -> T {
        let connection: RedisConnection
        if let reused = idle.withLock({ $0.popLast() }) {
            connection = reused
        } else {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now >= blockedUntil.load(ordering: .relaxed) else {
                failures.add(1, ordering: .relaxed)
                throw RedisError("Redis at \(address.display) is unreachable (retrying shortly)")
            }
            do {
                connection = try RedisConnection(address, timeoutMs: timeoutMs)
            } catch {
                blockedUntil.store(now + retryAfterNanoseconds, ordering: .relaxed)
                failing.store(true, ordering: .relaxed)
                failures.add(1, ordering: .relaxed)
                throw error
            }
        }
        do {
            let result = try body(connection)
            failing.store(false, ordering: .relaxed)
            idle.withLock { if $0.count < maxIdle { $0.append(connection) } }
            return result
        } catch {
            failing.store(true, ordering: .relaxed)
            failures.add(1, ordering: .relaxed)
            throw error
        }
    }

    /// Drops every idle connection (after Redis restarted, say).
    public func drain() { idle.withLock { $0.removeAll() } }
}
