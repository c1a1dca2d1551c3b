/// Whether the store can be reached (a shared store can be lost while Larder runs).
public protocol StorageHealth: Sendable {
    var storageHealthy: Bool { get }
    /// Store operations that failed since start (larder_store_errors_total).
    var storageFailures: Int { get }
}
