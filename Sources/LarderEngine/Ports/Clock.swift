import Foundation

/// The clock, injected so policy code never reads the system clock itself.
public struct Clock: Sendable {
    public var now: @Sendable () -> Double
    public init(now: @escaping @Sendable () -> Double) { self.now = now }

    /// Wall-clock seconds since 1970.
    public static let system = Clock { Date().timeIntervalSince1970 }
}
