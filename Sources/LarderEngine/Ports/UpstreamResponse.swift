public import LarderCore

public struct UpstreamResponse: Sendable {
    public var status: Int
    public var headers: [HeaderField]
    public var body: [UInt8]
    /// Seconds since 1970 when the request was sent and the response was complete
    /// (RFC 9111 §4.2.3 request_time / response_time).
    public var requestTime: Double
    public var responseTime: Double

    public init(status: Int, headers: [HeaderField], body: [UInt8], requestTime: Double, responseTime: Double) {
        self.status = status
        self.headers = headers
        self.body = body
        self.requestTime = requestTime
        self.responseTime = responseTime
    }
}
