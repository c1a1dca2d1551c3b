// Where the store's commands go: one Redis (RedisPool) or a Redis Cluster (RedisCluster). The
// store says what to run; the backend routes each command by its key.

import Foundation

public protocol RedisBackend: Sendable {
    /// Runs the commands (pipelined where they go to the same node); replies in order. A
    /// Redis error reply is returned as `.error`; a lost connection or a timeout throws.
    func run(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisValue]
    /// One SCAN step over the whole keyspace: the keys and the cursor to go on with ("0": done).
    func scan(cursor: String, pattern: String, count: Int) throws(RedisError) -> (keys: [String], next: String)
    /// The command's reply from every node (INFO).
    func onEveryNode(_ command: [String]) throws(RedisError) -> [RedisValue]
    /// Where the pub/sub subscriber may connect, in order of preference.
    func subscriberAddresses() -> [RedisAddress]
    var healthy: Bool { get }
    var failureCount: Int { get }
    /// For messages: host:port (never a password).
    var display: String { get }
    func drain()
}

extension RedisBackend {
    public func run(_ command: [String]) throws(RedisError) -> RedisValue {
        try run([command.map { Array($0.utf8) }])[0]
    }

    /// Runs writes an admin call reports as done: an error reply (READONLY from a demoted
    /// master, MISCONF, OOM, WRONGTYPE) fails the call like a lost connection, instead of
    /// counting as done while nothing changed.
    @discardableResult
    func runWrites(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisValue] {
        let replies = try run(commands)
        try requireNoErrorReply(replies[...])
        return replies
    }
}

/// Throws when one of `replies` is an error reply (see `runWrites`).
func requireNoErrorReply(_ replies: ArraySlice<RedisValue>) throws(RedisError) {
    for reply in replies {
        if case .error(let message) = reply { throw RedisError("Redis refused a write: \(message)") }
    }
}

/// The key a command acts on (what Redis Cluster routes by); nil for commands any node answers.
func routingKey(_ command: [[UInt8]]) -> [UInt8]? {
    guard let name = command.first.map({ String(decoding: $0, as: UTF8.self).uppercased() }) else { return nil }
    switch name {
    case "EVAL", "EVALSHA": return command.count > 3 && command[2] != Array("0".utf8) ? command[3] : nil
    case "PUBLISH", "PING", "INFO", "SCAN", "ASKING", "CLUSTER": return nil
    default: return command.count > 1 ? command[1] : nil
    }
}

extension RedisPool: RedisBackend {
    public func run(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisValue] {
        try with { connection throws(RedisError) in try connection.pipeline(commands) }
    }

    public func scan(cursor: String, pattern: String, count: Int) throws(RedisError) -> (keys: [String], next: String) {
        let parts = try run(["SCAN", cursor, "MATCH", pattern, "COUNT", String(count)]).array
        guard parts.count == 2, let next = parts[0].string else { throw RedisError("unexpected SCAN reply") }
        return (parts[1].array.compactMap(\.string), next)
    }

    public func onEveryNode(_ command: [String]) throws(RedisError) -> [RedisValue] { [try run(command)] }

    public func subscriberAddresses() -> [RedisAddress] { [address] }

    public var display: String { address.display }
}
