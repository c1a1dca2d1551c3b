/// A stored body kept in a file beside the database.
public struct BodyFile: Sendable, Equatable {
    public var path: String
    public var size: Int
    public var checksum: [UInt8]
    public init(path: String, size: Int, checksum: [UInt8]) {
        self.path = path
        self.size = size
        self.checksum = checksum
    }
}
