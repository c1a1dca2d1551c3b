// Redis Cluster: the slot map is read from any node (CLUSTER SLOTS), each command goes to the
// master of its key's slot (CRC16 of the key's hash tag, mod 16384), and the cluster's answers
// are followed: MOVED updates the map (and re-reads it), ASK sends that one command to the
// named node after ASKING. A node that cannot be reached makes the map be read again (after a
// failover, a replica has taken its slots); until then the command fails and the request
// passes through uncached.

import Foundation
import LarderCore
import LarderSync

public final class RedisCluster: RedisBackend {
    private let seeds: [RedisAddress]
    private let timeoutMs: Int
    private struct Topology {
        /// Slot → index into `nodes` (nil until discovered).
        var slots: [Int?] = Array(repeating: nil, count: 16384)
        var nodes: [RedisPool] = []
    }
    private let topology = Locked(Topology())
    private let failures = Atomic<Int>(0)
    private let failing = Atomic<Bool>(false)
    private let credentials: (user: String?, password: String?)

    /// `redis-cluster://host:port,host:port[,…]` (credentials as in redis://, on the first).
    public init(url: String, timeoutMs: Int) throws(RedisError) {
        guard url.hasPrefix("redis-cluster://") else {
            throw RedisError("'\(AddressRedaction.redacted(url))' is not redis-cluster://host:port,host:port")
        }
        let list = url.dropFirst("redis-cluster://".count).split(separator: ",").map(String.init)
        guard !list.isEmpty else { throw RedisError("'\(AddressRedaction.redacted(url))' names no node") }
        var seeds: [RedisAddress] = []
        for (index, item) in list.enumerated() {
            var address = try RedisAddress(url: "redis://" + item)
            if index > 0, let first = seeds.first {
                address.user = first.user
                address.password = first.password
            }
            seeds.append(address)
        }
        self.seeds = seeds
        self.timeoutMs = timeoutMs
        self.credentials = (seeds[0].user, seeds[0].password)
    }

    public var healthy: Bool { !failing.load(ordering: .relaxed) }
    public var failureCount: Int { failures.load(ordering: .relaxed) }
    public var display: String { seeds.map(\.display).joined(separator: ",") }
    public func drain() { topology.withLock { $0.nodes.forEach { $0.drain() } } }

    public func subscriberAddresses() -> [RedisAddress] {
        // Classic pub/sub is broadcast over the cluster bus: any node will do.
        topology.withLock { $0.nodes.map(\.address) } + seeds
    }

    /// Reads the slot map from the first node that answers (known masters first, then seeds).
    public func discover() throws(RedisError) {
        var lastError = RedisError("no cluster node answered")
        for address in subscriberAddresses() {
            do throws(RedisError) {
                let connection = try RedisConnection(address, timeoutMs: timeoutMs)
                let reply = try connection.command(["CLUSTER", "SLOTS"])
                if case .error(let message) = reply { throw RedisError("CLUSTER SLOTS: \(message)") }
                topology.withLock { topology in
                    var slots: [Int?] = Array(repeating: nil, count: 16384)
                    for range in reply.array {
                        let parts = range.array
                        guard parts.count >= 3, let start = parts[0].integer, let end = parts[1].integer,
                            let host = parts[2].array.first?.string, let port = parts[2].array.dropFirst().first?.integer
                        else { continue }
                        let index = node(host: host, port: Int(port), in: &topology)
                        for slot in Int(start)...Int(end) where slot < 16384 { slots[slot] = index }
                    }
                    topology.slots = slots
                }
                return
            } catch {
                lastError = error
            }
        }
        failing.store(true, ordering: .relaxed)
        throw lastError
    }

    private func node(host: String, port: Int, in topology: inout Topology) -> Int {
        if let index = topology.nodes.firstIndex(where: { $0.address.host == host && $0.address.port == port }) { return index }
        var address = seeds[0]
        address.host = host
        address.port = port
        address.database = 0
        topology.nodes.append(RedisPool(address: address, timeoutMs: timeoutMs, retryAfterMs: 200))
        return topology.nodes.count - 1
    }

    private func pool(forSlot slot: Int) throws(RedisError) -> RedisPool {
        if let pool = topology.withLock({ topology in topology.slots[slot].map { topology.nodes[$0] } }) { return pool }
        try discover()
        guard let pool = topology.withLock({ topology in topology.slots[slot].map { topology.nodes[$0] } }) else {
            throw RedisError("no cluster node serves slot \(slot)")
        }
        return pool
    }

    private func anyPool() throws(RedisError) -> RedisPool {
        let found = topology.withLock { topology -> RedisPool? in
            guard let index = topology.slots.lazy.compactMap({ $0 }).first else { return nil }
            return topology.nodes[index]
        }
        if let found { return found }
        try discover()
        return try pool(forSlot: 0)
    }

    /// Commands grouped by node and pipelined per node; redirections followed, each command at
    /// most 3 times.
    public func run(_ commands: [[[UInt8]]]) throws(RedisError) -> [RedisValue] {
        var replies = [RedisValue?](repeating: nil, count: commands.count)
        var pending = Array(commands.indices)
        var asking: [Int: RedisAddress] = [:]
        for attempt in 0..<3 {
            var groups: [ObjectIdentifier: (pool: RedisPool, indices: [Int])] = [:]
            for index in pending {
                let pool: RedisPool
                if let target = asking[index] {
                    pool = topology.withLock { topology in topology.nodes[node(host: target.host, port: target.port, in: &topology)] }
                } else if let key = routingKey(commands[index]) {
                    pool = try self.pool(forSlot: Self.slot(of: key))
                } else {
                    pool = try anyPool()
                }
                groups[ObjectIdentifier(pool), default: (pool, [])].indices.append(index)
            }
            var retry: [Int] = []
            var rediscover = false
            for (_, group) in groups {
                var batch: [[[UInt8]]] = []
                var positions: [Int?] = []
                for index in group.indices {
                    if asking[index] != nil {
                        batch.append([Array("ASKING".utf8)])
                        positions.append(nil)
                    }
                    batch.append(commands[index])
                    positions.append(index)
                }
                let answers: [RedisValue]
                do {
                    answers = try group.pool.run(batch)
                } catch {
                    // The node is gone (a failover?): read the map again and retry there.
                    failures.add(1, ordering: .relaxed)
                    if attempt == 2 {
                        failing.store(true, ordering: .relaxed)
                        throw error
                    }
                    rediscover = true
                    retry += group.indices
                    continue
                }
                for (position, answer) in zip(positions, answers) {
                    guard let index = position else { continue }
                    asking[index] = nil
                    if case .error(let message) = answer, let redirect = Self.redirect(message) {
                        if redirect.moved {
                            rediscover = true
                        } else {
                            var target = seeds[0]
                            target.host = redirect.host
                            target.port = redirect.port
                            asking[index] = target
                        }
                        retry.append(index)
                        continue
                    }
                    replies[index] = answer
                }
            }
            pending = retry
            if pending.isEmpty { break }
            if rediscover { try? discover() }
            if attempt == 2 {
                failing.store(true, ordering: .relaxed)
                throw RedisError("Redis Cluster kept redirecting")
            }
        }
        failing.store(false, ordering: .relaxed)
        return replies.map { $0 ?? .null }
    }

    /// SCAN over every master in turn; the cursor is "<node>:<that node's cursor>".
    public func scan(cursor: String, pattern: String, count: Int) throws(RedisError) -> (keys: [String], next: String) {
        let masters = try masterPools()
        let parts = cursor.split(separator: ":")
        var node = parts.count == 2 ? Int(parts[0]) ?? 0 : 0
        let position = parts.count == 2 ? String(parts[1]) : "0"
        guard node < masters.count else { return ([], "0") }
        let reply = try masters[node].run(["SCAN", position, "MATCH", pattern, "COUNT", String(count)]).array
        guard reply.count == 2, let next = reply[0].string else { throw RedisError("unexpected SCAN reply") }
        let keys = reply[1].array.compactMap(\.string)
        if next != "0" { return (keys, "\(node):\(next)") }
        node += 1
        return (keys, node < masters.count ? "\(node):0" : "0")
    }

    public func onEveryNode(_ command: [String]) throws(RedisError) -> [RedisValue] {
        try masterPools().map { pool throws(RedisError) in try pool.run(command) }
    }

    /// The masters serving slots, in a stable order.
    private func masterPools() throws(RedisError) -> [RedisPool] {
        if topology.withLock({ $0.nodes.isEmpty }) { try discover() }
        return topology.withLock { topology in
            Set(topology.slots.compactMap { $0 }).sorted().map { topology.nodes[$0] }
                .sorted { ($0.address.host, $0.address.port) < ($1.address.host, $1.address.port) }
        }
    }

    /// `MOVED 3999 127.0.0.1:6381` or `ASK 3999 127.0.0.1:6381`.
    private static func redirect(_ message: String) -> (moved: Bool, host: String, port: Int)? {
        let parts = message.split(separator: " ")
        guard parts.count == 3, parts[0] == "MOVED" || parts[0] == "ASK", let colon = parts[2].lastIndex(of: ":"),
            let port = Int(parts[2][parts[2].index(after: colon)...])
        else { return nil }
        return (parts[0] == "MOVED", String(parts[2][..<colon]), port)
    }

    /// Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag — the part between the first
    /// `{` and the next `}` when it is not empty — or of the whole key, mod 16384.
    static func slot(of key: [UInt8]) -> Int {
        var tagged = key[...]
        if let open = key.firstIndex(of: UInt8(ascii: "{")),
            let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        {
            tagged = key[(open + 1)..<close]
        }
        var crc: UInt16 = 0
        for byte in tagged {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        }
        return Int(crc) % 16384
    }
}
