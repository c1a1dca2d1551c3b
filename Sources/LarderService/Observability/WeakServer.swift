// The listeners /metrics reports on, held without keeping them alive.

import LarderHTTP

/// A listener the metrics read without keeping it alive.
struct WeakServer: @unchecked Sendable {
    // @unchecked Sendable: HTTPServer is Sendable; `weak` alone makes the compiler unsure.
    weak var server: HTTPServer?
    init(_ server: HTTPServer) { self.server = server }
}
