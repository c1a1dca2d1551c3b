// Expected failures that cross HTTP. Each has a stable code (documented in docs/api.md and the
// OpenAPI spec) and knows its status; the message is for humans and may change.

public struct LarderError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable, CaseIterable {
        case invalidRequest = "invalid_request"
        case notFound = "not_found"
        case unknownUpstream = "unknown_upstream"
        case methodNotAllowed = "method_not_allowed"
        case upstreamUnreachable = "upstream_unreachable"
        case upstreamTimeout = "upstream_timeout"
        case upstreamTooLarge = "upstream_too_large"
        case upstreamForbidden = "upstream_forbidden"
        case upstreamError = "upstream_error"
        case tooManyRedirects = "too_many_redirects"
        case notCached = "not_cached"
        case shuttingDown = "shutting_down"
        case notImplemented = "not_implemented"
        case validationFailed = "validation_failed"
        case cancelled = "cancelled"
        case referenceUnresolved = "reference_unresolved"
        case storageFailed = "storage_failed"
        case unauthorized = "unauthorized"
        case loopDetected = "loop_detected"
        case versionExhausted = "version_exhausted"
        case upstreamStatus = "upstream_status"
        case responseTooLarge = "response_too_large"
        case crossSiteRefused = "cross_site_refused"
        case hostNotAllowed = "host_not_allowed"
        case unsupportedMediaType = "unsupported_media_type"
        case dictionariesUnavailable = "dictionaries_unavailable"
    }

    public let code: Code
    public let message: String
    /// The request field at fault, for `invalid_request`.
    public let field: String?

    public init(_ code: Code, _ message: String, field: String? = nil) {
        self.code = code
        self.message = message
        self.field = field
    }

    public var status: Int {
        switch code {
        case .invalidRequest: 400
        case .unauthorized: 401
        case .loopDetected: 508
        case .versionExhausted, .dictionariesUnavailable: 409
        case .upstreamForbidden, .crossSiteRefused: 403
        case .unsupportedMediaType: 415
        case .hostNotAllowed: 421
        case .notFound, .unknownUpstream: 404
        case .methodNotAllowed: 405
        case .upstreamUnreachable, .upstreamTooLarge, .upstreamError, .tooManyRedirects, .validationFailed: 502
        case .upstreamStatus, .responseTooLarge: 502 // inside /batch and /chain results only
        case .notImplemented: 501
        case .referenceUnresolved: 422
        case .cancelled: 499 // inside /batch and /chain results only; nobody is left to answer
        case .shuttingDown, .storageFailed: 503
        case .upstreamTimeout, .notCached: 504
        }
    }

    public var description: String { "\(code.rawValue): \(message)" }

    public static func invalid(_ field: String, _ reason: String) -> LarderError {
        LarderError(.invalidRequest, "\(field): \(reason)", field: field)
    }

    /// `{"error":{"code":"…","message":"…","field":"…"}}`
    public var jsonBody: [UInt8] {
        var out: [UInt8] = []
        out.append(contentsOf: #"{"error":{"code":"#.utf8)
        JSONWriter.appendString(code.rawValue, to: &out)
        out.append(contentsOf: #","message":"#.utf8)
        JSONWriter.appendString(message, to: &out)
        if let field {
            out.append(contentsOf: #","field":"#.utf8)
            JSONWriter.appendString(field, to: &out)
        }
        out.append(contentsOf: "}}".utf8)
        return out
    }
}
