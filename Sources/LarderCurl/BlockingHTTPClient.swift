// A small blocking HTTP client for the `larder cache` CLI and the container's health check:
// one request, one easy handle, curl_easy_perform. It talks to a Larder the operator names, so
// none of the upstream policy (allowed hosts, private addresses) applies.

import CCurl

public struct BlockingHTTPResponse: Sendable {
    public var status: Int
    public var contentType: String?
    public var body: [UInt8]
}

public struct BlockingHTTPError: Error, CustomStringConvertible {
    public let description: String
}

/// How an https:// URL's server is trusted.
public struct BlockingTLSOptions: Sendable {
    /// PEM file of the CAs to trust instead of the system's (a private CA); nil: the system's.
    public var caFile: String?
    /// false: accept any certificate (for a health check of this machine's own Larder, which
    /// sends nothing secret).
    public var verifyPeer: Bool

    public init(caFile: String? = nil, verifyPeer: Bool = true) {
        self.caFile = caFile
        self.verifyPeer = verifyPeer
    }
}

public enum BlockingHTTPClient {
    /// Sends one request; throws when no HTTP response came back (refused, timed out, bad URL).
    public static func send(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        timeoutSeconds: Int = 30, tls: BlockingTLSOptions = BlockingTLSOptions()
    ) throws(BlockingHTTPError) -> BlockingHTTPResponse {
        curlGlobalInit
        guard let handle = curl_easy_init() else { throw BlockingHTTPError(description: "cannot create a libcurl handle") }
        defer { curl_easy_cleanup(handle) }
        let sink = Sink()
        let context = Unmanaged.passUnretained(sink).toOpaque()
        larder_curl_setopt_string(handle, CURLOPT_URL, url)
        larder_curl_setopt_long(handle, CURLOPT_TIMEOUT, timeoutSeconds)
        larder_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        if let caFile = tls.caFile { larder_curl_setopt_string(handle, CURLOPT_CAINFO, caFile) }
        if !tls.verifyPeer {
            larder_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 0)
            larder_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 0)
        }
        larder_curl_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION, sinkCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, context)
        switch method {
        case "GET": larder_curl_setopt_long(handle, CURLOPT_HTTPGET, 1)
        case "HEAD": larder_curl_setopt_long(handle, CURLOPT_NOBODY, 1)
        default: larder_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method)
        }
        if let body {
            larder_curl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            body.withUnsafeBytes { bytes in
                _ = larder_curl_setopt_pointer(
                    handle, CURLOPT_COPYPOSTFIELDS,
                    UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
            }
        }
        var list: UnsafeMutablePointer<curl_slist>?
        for (name, value) in headers { list = curl_slist_append(list, "\(name): \(value)") }
        list = curl_slist_append(list, "Expect:")
        defer { curl_slist_free_all(list) }
        larder_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(list))
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE))
        let code = errorBuffer.withUnsafeMutableBufferPointer { buffer -> CURLcode in
            larder_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, buffer.baseAddress)
            return curl_easy_perform(handle)
        }
        guard code == CURLE_OK else {
            let detail = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            throw BlockingHTTPError(description: detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail)
        }
        var status = 0
        larder_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        var type: UnsafeMutableRawPointer?
        larder_curl_getinfo_pointer(handle, CURLINFO_CONTENT_TYPE, &type)
        return BlockingHTTPResponse(
            status: status, contentType: type.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) },
            body: sink.bytes)
    }

    private static let curlGlobalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()
}

private final class Sink {
    var bytes: [UInt8] = []
}

private let sinkCallback: larder_curl_data_callback = { data, size, count, context in
    let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    data.withMemoryRebound(to: UInt8.self, capacity: length) {
        sink.bytes.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
    }
    return length
}
