// How /batch and /chain answer their items, the same for both: with `Accept: application/x-ndjson`
// one line per item as it completes and the summary line last (each written whole, the next only
// once the socket took the last, nothing rendered for a client that left); otherwise each item is
// kept as rendered, in its place, and one JSON document goes out when the run finishes. Either way
// the items an answer holds are bounded by `--max-batch-bytes`, and a client that goes away
// cancels the run.

import LarderCore
import LarderEngine
import LarderHTTP
import LarderSync

/// A run of items: BatchRun or ChainRun.
protocol ItemRunning: Sendable {
    func start()
    func cancel()
}

extension BatchRun: ItemRunning {}
extension ChainRun: ItemRunning {}

enum ItemAnswer {
    /// Renders the summary: with the kept items (moved out as they are copied in), or without
    /// them (nil) for the stream's last line, which `line` ends with a newline.
    typealias Summary = @Sendable (_ items: inout [[UInt8]]?, _ line: Bool) -> [UInt8]

    /// Answers `routeRequest` with the items of the run `makeRun` builds around the sink it is
    /// given; the run calls `finish` with its summary once every item was handed out. `keep`
    /// says which items the document holds (every item is rendered and counted all the same).
    static func answer(
        _ routeRequest: RouteRequest, ids: [String], maxAnswerBytes: Int,
        keep: @escaping @Sendable (ItemOutcome) -> Bool = { _ in true },
        makeRun: (_ sink: ItemSink, _ finish: @escaping @Sendable (Summary) -> Void) -> any ItemRunning
    ) -> RouteAnswer? {
        let receivedAt = routeRequest.receivedAt
        let budget = AnswerBudget(limit: maxAnswerBytes)
        if ItemRendering.wantsNDJSON(routeRequest.http) {
            let stream = HTTPResponseStream()
            let sink = ItemSink(
                budget: budget,
                render: { outcome in
                    // Nobody reads what is rendered for a client that left.
                    stream.isClosed
                        ? []
                        : ItemRendering.item(outcome, id: ids[outcome.index], index: outcome.index, receivedAt: receivedAt, line: true)
                },
                write: { _, line, taken in
                    stream.write(line, taken: taken)
                })
            let run = makeRun(sink) { summary in
                var none: [[UInt8]]? = nil
                stream.write(summary(&none, true))
                stream.finish()
            }
            routeRequest.onClientGone { run.cancel() }
            run.start()
            return RouteAnswer(HTTPServerResponse(status: 200, headers: [("Content-Type", "application/x-ndjson")], stream: stream))
        }
        let rendered = Locked<[[UInt8]]>(Array(repeating: [], count: ids.count))
        let sink = ItemSink(
            budget: budget,
            render: { outcome in
                ItemRendering.item(outcome, id: ids[outcome.index], index: nil, receivedAt: receivedAt)
            },
            write: { outcome, item, taken in
                if keep(outcome) { rendered.withLock { $0[outcome.index] = item } }
                taken()
            })
        let run = makeRun(sink) { summary in
            // The items go out of the run's hands into the document.
            var items: [[UInt8]]? = rendered.withLock { items in
                defer { items = [] }
                return items
            }
            routeRequest.respond(AdminRoute.json(200, summary(&items, false)))
        }
        routeRequest.onClientGone { run.cancel() }
        run.start()
        return nil
    }
}
