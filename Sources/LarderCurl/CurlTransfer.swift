// One upstream exchange (a logical request across its redirect hops and resumptions) and one
// transfer (a hop: an easy handle and what libcurl's callbacks collect), with those callbacks.
// Both are confined to the thread of the driver that runs them.

import CCurl
import Foundation
import LarderCore
import LarderEngine

#if canImport(Glibc)
    import Glibc
#endif

/// One logical request, across its redirect hops. Confined to its driver's thread.
final class Exchange: @unchecked Sendable {
    let request: UpstreamRequest
    let completion: @Sendable (Result<UpstreamResponse, LarderError>) -> Void
    let requestTime: Double
    let deadline: Double
    var url: UpstreamURL
    var method: HTTPMethod
    var headers: [HeaderField]
    var body: [UInt8]?
    var hops = 0
    /// A download cut short: the first response's header fields and the bytes so far.
    var partial: (headers: [HeaderField], body: [UInt8])?
    var resumes = 0

    init(request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void, requestTime: Double) {
        self.request = request
        self.completion = completion
        self.requestTime = requestTime
        self.deadline = requestTime + Double(request.timeoutMs) / 1000
        self.url = request.url
        self.method = request.method
        self.headers = request.headers
        self.body = request.body
    }

    /// Completed (answered or failed): later calls are ignored (a cancellation can race an answer).
    private var done = false

    func fail(_ error: LarderError) {
        guard !done else { return }
        done = true
        request.cancellation?.release()
        completion(.failure(error))
    }

    func succeed(_ response: UpstreamResponse) {
        guard !done else { return }
        done = true
        request.cancellation?.release()
        completion(.success(response))
    }
}

/// One hop: an easy handle and what its callbacks collect. Retained (through `Unmanaged`)
/// while libcurl may call back into it; `release` balances that.
final class Transfer {
    let handle: UnsafeMutableRawPointer
    let exchange: Exchange
    let policy: UpstreamAccessPolicy
    /// The driver running it (its bounds, its list of paused transfers), which outlives it.
    unowned let driver: CurlDriver
    let sequence: Int
    /// Body bytes counted against the budget.
    var accounted = 0
    var headers: [HeaderField] = []
    var body: [UInt8] = []
    var tooLarge = false
    var refusal: String?
    /// The upstream answered 101 Switching Protocols, which Larder never asks for.
    var switchedProtocols = false
    /// The status of the response being read (0 before its status line).
    var status = 0
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    private var unmanaged: Unmanaged<Transfer>?

    init(handle: UnsafeMutableRawPointer, exchange: Exchange, policy: UpstreamAccessPolicy, driver: CurlDriver, sequence: Int) {
        self.handle = handle
        self.exchange = exchange
        self.policy = policy
        self.driver = driver
        self.sequence = sequence
        errorBuffer.initialize(to: 0)
    }

    deinit {
        errorBuffer.deallocate()
    }

    func configure(userAgent: String, timeoutMs: Int, resolve: UnsafeMutablePointer<curl_slist>?) {
        let context = Unmanaged.passRetained(self)
        unmanaged = context
        let opaque = context.toOpaque()
        let request = exchange.request
        larder_curl_setopt_string(handle, CURLOPT_URL, exchange.url.absoluteString)
        larder_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, cString("http,https"))
        larder_curl_setopt_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, cString("http,https"))
        larder_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        larder_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        // Never through a proxy from the environment: the address checks apply to the origin.
        larder_curl_setopt_string(handle, CURLOPT_PROXY, cString(""))
        if let resolve { larder_curl_setopt_pointer(handle, CURLOPT_RESOLVE, UnsafeMutableRawPointer(resolve)) }
        larder_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs)
        larder_curl_setopt_offset(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(request.maxBodyBytes))
        larder_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        larder_curl_setopt_pointer(handle, CURLOPT_PRIVATE, opaque)
        larder_curl_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION, writeCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, opaque)
        larder_curl_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION, headerCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, opaque)
        larder_curl_setopt_opensocket(handle, openSocketCallback)
        larder_curl_setopt_pointer(handle, CURLOPT_OPENSOCKETDATA, opaque)

        switch exchange.method {
        case .get:
            larder_curl_setopt_long(handle, CURLOPT_HTTPGET, 1)
        case .head:
            larder_curl_setopt_long(handle, CURLOPT_NOBODY, 1)
        default:
            // Any other method (PUT, DELETE, a method Larder does not know) is sent as named,
            // with the body as given.
            if exchange.method != .post {
                larder_curl_setopt_string(handle, CURLOPT_CUSTOMREQUEST, exchange.method.rawValue)
            }
            if let body = exchange.body {
                larder_curl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
                body.withUnsafeBytes { bytes in
                    // COPYPOSTFIELDS: libcurl keeps its own copy, so `body` need not outlive the call.
                    _ = larder_curl_setopt_pointer(
                        handle, CURLOPT_COPYPOSTFIELDS,
                        UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(errorBuffer)))
                }
            } else if exchange.method == .post {
                larder_curl_setopt_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, 0)
                larder_curl_setopt_string(handle, CURLOPT_COPYPOSTFIELDS, "")
            }
        }

        var list: UnsafeMutablePointer<curl_slist>?
        var hasUserAgent = false
        var hasContentType = false
        for field in exchange.headers {
            if field.name.caseInsensitiveEquals("user-agent") { hasUserAgent = true }
            if field.name.caseInsensitiveEquals("content-type") { hasContentType = true }
            // "Name:" alone would remove a libcurl default; "Name;" sends an empty value.
            list = appendLine(to: list, name: field.name, value: field.value)
        }
        if !hasUserAgent { list = appendLine(to: list, name: "User-Agent", value: userAgent) }
        // Only a request with a body needs these two, and each listed field is one more that
        // libcurl formats and compares with its own on every request.
        if exchange.method != .get, exchange.method != .head {
            // No "Expect: 100-continue" round trip for larger bodies.
            list = curl_slist_append(list, cString("Expect:"))
            // libcurl labels a body it is given as a form (application/x-www-form-urlencoded);
            // the body is the caller's, and so is its type, or lack of one.
            if !hasContentType { list = curl_slist_append(list, cString("Content-Type:")) }
        }
        headerList = list
        larder_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(list))
    }

    /// `name: value` (or `name;` for an empty value, which libcurl sends as empty) added to
    /// `list`, built as bytes: field values that are not UTF-8 (obs-text) go out as they came
    /// in (`FieldBytes`), and no String is interpolated and copied again as a C string.
    private func appendLine(to list: UnsafeMutablePointer<curl_slist>?, name: String, value: String)
        -> UnsafeMutablePointer<curl_slist>?
    {
        func append(_ text: String, to line: inout [UInt8]) {
            if FieldBytes.hasRawBytes(text) { line.append(contentsOf: FieldBytes.bytes(text)) } else { line.append(contentsOf: text.utf8) }
        }
        var line: [UInt8] = []
        line.reserveCapacity(name.utf8.count + value.utf8.count + 3)
        append(name, to: &line)
        if value.isEmpty {
            line.append(UInt8(ascii: ";"))
        } else {
            line.append(contentsOf: ": ".utf8)
            append(value, to: &line)
        }
        line.append(0)
        return line.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { curl_slist_append(list, $0.baseAddress) }
        }
    }

    /// Frees the handle and the header list, and drops the callbacks' reference.
    /// Frees what the transfer holds besides its handle (which the upstream retires).
    func release() {
        curl_slist_free_all(headerList)
        headerList = nil
        unmanaged?.release()
        unmanaged = nil
    }

    func error(for code: CURLcode, timeoutMs: Int) -> LarderError {
        let detail = errorBuffer.pointee != 0 ? String(cString: errorBuffer) : String(cString: curl_easy_strerror(code))
        if let refusal {
            return LarderError(.upstreamForbidden, "connection refused by policy: \(refusal)")
        }
        if switchedProtocols {
            return LarderError(.upstreamError, "\(exchange.url.authority) switched protocols (101), which Larder did not ask for")
        }
        if tooLarge || code == CURLE_FILESIZE_EXCEEDED {
            return LarderError(.upstreamTooLarge, "upstream body is larger than \(exchange.request.maxBodyBytes) bytes")
        }
        switch code {
        case CURLE_OPERATION_TIMEDOUT:
            return LarderError(.upstreamTimeout, "upstream did not answer within \(timeoutMs) ms")
        case CURLE_COULDNT_RESOLVE_HOST:
            return LarderError(.upstreamUnreachable, "cannot resolve host '\(exchange.url.host)': \(detail)")
        case CURLE_WEIRD_SERVER_REPLY, CURLE_BAD_CONTENT_ENCODING, CURLE_PARTIAL_FILE:
            // It answered, but not with a response that can be read to its end.
            return LarderError(.upstreamError, "\(exchange.url.authority) sent an unreadable response: \(detail)")
        default:
            return LarderError(.upstreamUnreachable, "\(exchange.url.authority): \(detail)")
        }
    }

    /// Takes one header line; returns false to abort the transfer.
    /// One header line as libcurl hands it over (with its CRLF), read as bytes: a status
    /// line, a field, a continuation, or the blank line ending a header section.
    func receiveHeaderLine(_ raw: UnsafeBufferPointer<UInt8>) -> Bool {
        var end = raw.count
        while end > 0, raw[end - 1] == 0x0D || raw[end - 1] == 0x0A { end -= 1 }
        let line = UnsafeBufferPointer(rebasing: raw[0..<end])
        if line.starts(with: Self.httpPrefix) {
            // The status code: the digits after the first space.
            var code = 0
            if var index = line.firstIndex(of: 0x20) {
                index += 1
                while index < line.count, (0x30...0x39).contains(line[index]) {
                    code = code * 10 + Int(line[index] - 0x30)
                    index += 1
                }
            }
            // 101 would hand the connection over to another protocol and wait on it forever:
            // Larder never sends Upgrade, so it is an error (RFC 9110 §15.2.2).
            if code == 101 {
                switchedProtocols = true
                return false
            }
            status = code
            // A new status line: an interim (1xx) response came first; start over.
            headers.removeAll(keepingCapacity: true)
            return true
        }
        guard !line.isEmpty else {
            // The end of a final response's header section: its announced length, for progress.
            if status == 200, exchange.partial == nil, let progress = exchange.request.progress,
                let length = headers.first(named: "content-length").flatMap({ Int($0.trimmingSpaces) })
            {
                progress.add(expected: length)
            }
            return true
        }
        if line[0] == 0x20 || line[0] == 0x09 {
            // obs-fold (RFC 9112 §5.2): a continuation of the previous field.
            if !headers.isEmpty { headers[headers.count - 1].value += " " + Self.trimmedString(line) }
            return true
        }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return true }
        headers.append(
            HeaderField(
                FieldBytes.string(UnsafeBufferPointer(rebasing: line[..<colon])),
                Self.trimmedString(UnsafeBufferPointer(rebasing: line[(colon + 1)...]))))
        return true
    }

    private static let httpPrefix = Array("HTTP/".utf8)

    /// The bytes without leading and trailing spaces and tabs, as a field value.
    private static func trimmedString(_ bytes: UnsafeBufferPointer<UInt8>) -> String {
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return FieldBytes.string(UnsafeBufferPointer(rebasing: bytes[start..<end]))
    }
}

// MARK: - C callbacks (capture nothing; context arrives through the void* slot)

let writeCallback: larder_curl_data_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    guard transfer.body.count + length <= transfer.exchange.request.maxBodyBytes else {
        transfer.tooLarge = true
        return 0 // makes libcurl abort with CURLE_WRITE_ERROR
    }
    guard transfer.driver.takeBudget(length, for: transfer) else {
        // Over the in-flight budget: libcurl keeps these bytes and offers them again on unpause.
        return larder_curl_writefunc_pause()
    }
    transfer.exchange.request.progress?.add(received: length)
    data.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
        transfer.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: length))
    }
    return length
}

let headerCallback: larder_curl_data_callback = { data, size, count, context in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let length = size * count
    let accepted = data.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
        transfer.receiveHeaderLine(UnsafeBufferPointer(start: bytes, count: length))
    }
    return accepted ? length : 0
}

let openSocketCallback: larder_curl_opensocket_callback = { context, purpose, address in
    let transfer = Unmanaged<Transfer>.fromOpaque(context!).takeUnretainedValue()
    let family = address.pointee.family
    let endpoint = withUnsafeMutablePointer(to: &address.pointee.addr) { socketEndpoint(UnsafeRawPointer($0), family: family) }
    guard let endpoint else {
        transfer.refusal = "address family \(family) is not allowed"
        return larder_curl_socket_bad()
    }
    if let refusal = transfer.policy.refusal(forAddress: endpoint.ip, port: endpoint.port, isLocal: LocalAddresses.contains) {
        transfer.refusal = refusal
        return larder_curl_socket_bad()
    }
    return socket(family, address.pointee.socktype, address.pointee.protocol)
}

/// The address and port of a sockaddr_in or sockaddr_in6 at `raw`; nil for another family.
func socketEndpoint(_ raw: UnsafeRawPointer, family: Int32) -> (ip: IPAddress, port: Int)? {
    switch family {
    case AF_INET:
        let sin = raw.assumingMemoryBound(to: sockaddr_in.self).pointee
        return withUnsafeBytes(of: sin.sin_addr) { IPAddress(bytes: Array($0)) }.map { ($0, Int(UInt16(bigEndian: sin.sin_port))) }
    case AF_INET6:
        let sin6 = raw.assumingMemoryBound(to: sockaddr_in6.self).pointee
        return withUnsafeBytes(of: sin6.sin6_addr) { IPAddress(bytes: Array($0)) }.map { ($0, Int(UInt16(bigEndian: sin6.sin6_port))) }
    default:
        return nil
    }
}

/// This machine's interface addresses, read when asked (interfaces come and go): only for a
/// connection to the port of a Larder listener bound to a wildcard address (OwnListeners).
enum LocalAddresses {
    static func contains(_ address: IPAddress) -> Bool {
        var list: UnsafeMutablePointer<ifaddrs>?
        // Unreadable: every address counts as local, so the connection is refused, not let through.
        guard getifaddrs(&list) == 0 else { return true }
        defer { freeifaddrs(list) }
        var entry = list
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            guard let socketAddress = current.pointee.ifa_addr else { continue }
            let local = socketEndpoint(UnsafeRawPointer(socketAddress), family: Int32(socketAddress.pointee.sa_family))
            if let local, local.ip.unmapped == address { return true }
        }
        return false
    }
}

/// A literal as a C string without a copy (string literals are stored with a terminating
/// NUL); a String argument of fewer than 16 bytes is copied into a new array on every call.
/// Only for literals of zero or several characters: a one-character literal may be stored as a
/// scalar, without a pointer (`utf8Start` traps then).
@inline(__always) func cString(_ literal: StaticString) -> UnsafePointer<CChar> {
    UnsafeRawPointer(literal.utf8Start).assumingMemoryBound(to: CChar.self)
}
