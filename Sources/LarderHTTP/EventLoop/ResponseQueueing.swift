import CMicroHTTPD
import Dispatch
import LarderCore

#if canImport(Glibc)
    import Glibc
#endif

/// Queues `response` on `connection`: a kept recent response that is the same (RecentResponses),
/// or a new libmicrohttpd response over the stream, the file, the announced HEAD length or the
/// bytes, with its header fields. Called on the connection's loop thread, never on the first
/// access-handler call of a request that is kept alive (see HTTPServer).
func queue(_ response: HTTPServerResponse, on connection: OpaquePointer, server: HTTPServer) -> MHD_Result {
    let recent = RecentResponses.mayKeep(response) ? server.loop(of: connection)?.recentResponses : nil
    let now = recent == nil ? 0 : DispatchTime.now().uptimeNanoseconds
    if let recent, let same = recent.find(response, now: now) {
        return MHD_queue_response(connection, UInt32(response.status), same)
    }
    let mhdResponse: OpaquePointer?
    if let stream = response.stream {
        mhdResponse = stream.makeResponse(
            on: RequestContext.ConnectionHandle(pointer: connection, loop: server.loop(of: connection), suspensions: server.suspensions))
    } else if let file = response.file, let descriptor = file.descriptor.take() {
        // libmicrohttpd owns the descriptor from here and closes it with the response.
        mhdResponse = MHD_create_response_from_fd_at_offset64(UInt64(file.length), descriptor, UInt64(file.offset))
        if mhdResponse == nil { close(descriptor) }
    } else if let length = response.headContentLength, length >= 0, response.body.isEmpty {
        // A body of that length that is never read: libmicrohttpd announces its size and, for
        // a HEAD, sends nothing of it (its own Content-Length cannot be replaced otherwise).
        mhdResponse = MHD_create_response_from_callback(
            UInt64(length), 4096, { _, _, _, _ in larder_mhd_end_with_error() },
            nil, nil)
    } else if response.body.count >= ResponseBody.lentFrom {
        // Lent, not copied: libmicrohttpd sends from the body's own storage and lets go of it
        // with the response (copying a large body into libmicrohttpd's buffer was a large share
        // of a memory-tier hit's work).
        let body = Unmanaged.passRetained(ResponseBody(response.body))
        mhdResponse = body.takeUnretainedValue().bytes.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer_with_free_callback_cls(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), responseBodyReleased, body.toOpaque())
        }
        if mhdResponse == nil { body.release() }
    } else {
        mhdResponse = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                .RESPMEM_MUST_COPY)
        }
    }
    guard let mhdResponse else { return MHD_Result.NO }
    for header in response.headers {
        if FieldBytes.hasRawBytes(header.value) {
            // Bytes that are not UTF-8 (obs-text) go out as they came in.
            let raw = FieldBytes.bytes(header.value) + [0]
            raw.withUnsafeBufferPointer { value in
                value.withMemoryRebound(to: CChar.self) { _ = MHD_add_response_header(mhdResponse, header.name, $0.baseAddress) }
            }
        } else {
            // withCString, not the implicit conversion: that copies a short string (a name, most
            // values) to a heap array each time; withCString copies it to the stack.
            header.name.withCString { name in
                header.value.withCString { value in _ = MHD_add_response_header(mhdResponse, name, value) }
            }
        }
    }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    if let recent, result == MHD_Result.YES {
        recent.keep(response, mhdResponse, now: now)
    } else {
        MHD_destroy_response(mhdResponse)
    }
    return result
}

/// A response body libmicrohttpd sends without copying. The array is a constant of this
/// object, so its (native, contiguous) storage neither moves nor goes away until libmicrohttpd
/// is done with the response and releases the object.
private final class ResponseBody {
    /// Smaller bodies are copied: libmicrohttpd's copy costs less than this object.
    static let lentFrom = 4096
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

private let responseBodyReleased: MHD_ContentReaderFreeCallback = { context in
    guard let context else { return }
    Unmanaged<ResponseBody>.fromOpaque(context).release()
}
