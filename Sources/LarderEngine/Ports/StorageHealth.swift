/// Whether the store can be reached (a shared store can be lost while Larder runs).
public protocol StorageHealth: Sendable {
    var storageHealthy: Bool { get }
}
