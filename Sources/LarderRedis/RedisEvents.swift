// Pub/sub between instances: one subscriber connection per instance, on its own thread, and
// messages published through the pool. A message is "<verb> <argument>". After the subscriber
// loses Redis and reconnects it delivers "resync": messages may have been missed meanwhile, so
// the memory tier is dropped whole and the namespace versions are read again.

import Dispatch
import Foundation
import LarderSync
import Logging

final class RedisEvents: Sendable {
    private let addresses: @Sendable () -> [RedisAddress]
    let channel: String
    private let logger: Logger
    private let handler = CallbackSlot<(verb: String, argument: String)>()
    private let stopped = Atomic<Bool>(false)
    private let current = Locked<RedisConnection?>(nil)

    init(addresses: @escaping @Sendable () -> [RedisAddress], channel: String, logger: Logger) {
        self.addresses = addresses
        self.channel = channel
        self.logger = logger
    }

    func onMessage(_ handler: @escaping @Sendable (String, String) -> Void) { self.handler.set { handler($0.verb, $0.argument) } }

    func start() {
        let thread = Thread { [self] in
            nameCurrentThread("larder-redis-events")
            run()
        }
        thread.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        current.withLock { $0?.interrupt() }
    }

    func publish(_ backend: any RedisBackend, _ verb: String, _ argument: String) {
        _ = try? backend.run(["PUBLISH", channel, "\(verb) \(argument)"])
    }

    private func run() {
        var connectedBefore = false
        var attempt = 0
        while !stopped.load(ordering: .relaxed) {
            do {
                // Round the candidates (a cluster's nodes; one address otherwise).
                let candidates = addresses()
                attempt += 1
                guard !candidates.isEmpty else { throw RedisError("no Redis address to subscribe at") }
                let connection = try RedisConnection(candidates[attempt % candidates.count], timeoutMs: 1000)
                connection.setTimeout(milliseconds: 0)
                current.withLock { $0 = connection }
                try connection.send(["SUBSCRIBE", channel])
                if connectedBefore {
                    logger.info("reconnected to Redis events; dropping the memory tier (messages may have been missed)")
                    handler((verb: "resync", argument: ""))
                }
                connectedBefore = true
                while !stopped.load(ordering: .relaxed) {
                    let message = try connection.nextMessage().array
                    guard message.count == 3, message[0].string == "message", let text = message[2].string else { continue }
                    let parts = text.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
                    handler((verb: String(parts[0]), argument: parts.count > 1 ? String(parts[1]) : ""))
                }
            } catch {
                current.withLock { $0 = nil }
                if stopped.load(ordering: .relaxed) { return }
                if connectedBefore { logger.warning("lost Redis events; reconnecting", metadata: ["error": "\(error)"]) }
                Thread.sleep(forTimeInterval: 0.2)
            }
        }
    }
}
