// A batch hands its items to its sink one at a time and, while the sink has not taken the last
// one (a stream's client reads slowly), starts no fetch and hands out nothing more; its end comes
// after its last item. Checked without sockets: the sink here takes an item only when told.

import Dispatch
import Foundation
import LarderCore
import LarderEngine
import LarderSync
import Logging
import XCTest

final class ItemDeliveryTests: XCTestCase {
    private final class HoldingSink: Sendable {
        let written = Locked<[Int]>([])
        let waiting = Locked<[@Sendable () -> Void]>([])
        let wrote = DispatchSemaphore(value: 0)

        var sink: ItemSink {
            ItemSink(
                budget: nil, render: { Array("item \($0.index)".utf8) },
                write: { [self] outcome, _, taken in
                    written.withLock { $0.append(outcome.index) }
                    waiting.withLock { $0.append(taken) }
                    wrote.signal()
                })
        }

        /// The socket takes the oldest item written.
        func take() {
            let taken = waiting.withLock { $0.isEmpty ? nil : $0.removeFirst() }
            taken?()
        }
    }

    func testASlowSinkHoldsBackFetchesAndTheEndComesAfterTheLastItem() throws {
        let upstream = RetainingUpstream()
        let engine = FetchEngine(
            store: MemoryCacheStore(), upstream: upstream, keys: CacheKeyBuilder(secret: Array(repeating: 1, count: 32)),
            clock: Clock { 1_000 }, logger: Logger(label: "engine-test"))
        let items = try (0..<10).map { engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/\($0)"))) }
        let holding = HoldingSink()
        let finished = Locked<(writesBefore: Int, count: Int)?>(nil)
        let ended = DispatchSemaphore(value: 0)
        let run = BatchRun(
            engine: engine, items: items, mode: .settle, concurrency: 2, clock: Clock { 1_000 }, sink: holding.sink,
            onFinish: { outcomes in
                finished.withLock { $0 = (holding.written.withLock { $0.count }, outcomes.filter { $0.state == .done }.count) }
                ended.signal()
            })
        run.start()
        for handedOut in 1...10 {
            XCTAssertEqual(holding.wrote.wait(timeout: .now() + 10), .success)
            XCTAssertEqual(holding.written.withLock { $0.count }, handedOut, "one item at a time")
            XCTAssertLessThanOrEqual(
                upstream.kept.withLock { $0.count }, handedOut + 2,
                "no fetch beyond the slots while an item waits for the sink")
            // The end may follow the last item as soon as it is handed out (it is written
            // behind it); before that, an item waiting for the sink holds everything back.
            if handedOut < 10 { XCTAssertNil(finished.withLock { $0 }, "no end while an item is not handed out") }
            holding.take()
        }
        XCTAssertEqual(ended.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(finished.withLock { $0 }?.writesBefore, 10, "the end came after the last item")
        XCTAssertEqual(finished.withLock { $0 }?.count, 10)
        XCTAssertEqual(Set(holding.written.withLock { $0 }), Set(0..<10))
        withExtendedLifetime(run) {}
    }
}
