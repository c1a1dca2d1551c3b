// GET /livez, /readyz and /healthz, on every listener but the proxy-root one, without a token.
//
// - /livez: the process answers (200), whatever its store; a restart would not help anything
//   else.
// - /readyz: send it traffic (200), or not (503): not while the store is degraded and failing
//   now (Readiness; unless --ready-while-degraded).
// - /healthz: 200 with the store's health in the body.
// While Larder drains, the server answers every new request itself, these included, with
// 503 shutting_down (HTTPServer.stopAccepting): a draining instance is neither ready nor to be
// probed further.

import LarderCore
import LarderEngine
import LarderHTTP
import LarderSync

final class ProbeRoute: Sendable {
    private let health: (any StorageHealth)?
    private let clock: Clock
    private let readyWhileDegraded: Bool
    private let readiness = Locked(Readiness())

    init(health: (any StorageHealth)?, clock: Clock, readyWhileDegraded: Bool) {
        self.health = health
        self.clock = clock
        self.readyWhileDegraded = readyWhileDegraded
    }

    private var storageHealthy: Bool { health?.storageHealthy != false }

    func live() -> RouteAnswer {
        RouteAnswer(AdminRoute.json(200, Array(#"{"status":"ok"}"#.utf8)))
    }

    func ready() -> RouteAnswer {
        let healthy = storageHealthy
        let failures = health?.storageFailures ?? 0
        let now = clock.now()
        let ready = readyWhileDegraded || readiness.withLock { $0.isReady(storageHealthy: healthy, failures: failures, now: now) }
        let body = #"{"status":"\#(ready ? "ready" : "not_ready")","storage":"\#(healthy ? "ok" : "degraded")"}"#
        return RouteAnswer(AdminRoute.json(ready ? 200 : 503, Array(body.utf8)))
    }

    func healthz() -> RouteAnswer {
        // Degraded storage still answers 200: requests pass through uncached, correctly.
        RouteAnswer(AdminRoute.json(200, Array(#"{"status":"ok","storage":"\#(storageHealthy ? "ok" : "degraded")"}"#.utf8)))
    }
}
