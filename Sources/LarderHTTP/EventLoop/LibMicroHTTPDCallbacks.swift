// libmicrohttpd's callbacks for HTTPServer's daemons. They capture nothing: the server arrives
// through the void* slot, each request's RequestContext through its *con_cls and each
// connection's header deadline through its socket context. What a request's calls decide is
// RequestPhase's; these carry it out.

import CMicroHTTPD
import LarderCore

/// The first callback of a request: its context is made here.
let uriLogger: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>, OpaquePointer) -> UnsafeMutableRawPointer? = {
    serverPointer, uri, connection in
    let deadline = larder_mhd_socket_context(connection).map { Unmanaged<ConnectionDeadline>.fromOpaque($0).takeUnretainedValue() }
    let server = serverPointer.map { Unmanaged<HTTPServer>.fromOpaque($0).takeUnretainedValue() }
    let maxBodyBytes = server?.configuration.maxRequestBodyBytes ?? 0
    let context = RequestContext(rawTarget: String(cString: uri), headerDeadline: deadline, maxBodyBytes: maxBodyBytes)
    // The value returned becomes the request's *con_cls; `requestCompleted` releases it.
    return Unmanaged.passRetained(context).toOpaque()
}

/// A connection was accepted (on its loop's thread, inside MHD_add_connection): its first
/// header section gets its deadline, kept in the connection's socket context until it closes.
let connectionNotified: MHD_NotifyConnectionCallback = { serverPointer, connection, socketContext, event in
    guard let serverPointer, let connection else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    switch event {
    case .CONNECTION_NOTIFY_STARTED:
        guard let socketContext, let loop = server.loop(of: connection) else { return }
        let deadline = loop.headerDeadlines.add(fd: larder_mhd_connection_fd(connection))
        socketContext.pointee = Unmanaged.passRetained(deadline).toOpaque()
    case .CONNECTION_NOTIFY_CLOSED:
        if let socketContext, let raw = socketContext.pointee {
            socketContext.pointee = nil
            Unmanaged<ConnectionDeadline>.fromOpaque(raw).takeRetainedValue().closed()
        }
        server.connectionClosed(connection)
    default:
        break
    }
}

let requestCompleted: MHD_RequestCompletedCallback = { serverPointer, _, contextSlot, termination in
    guard let contextSlot, let raw = contextSlot.pointee else { return }
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeRetainedValue()
    contextSlot.pointee = nil
    guard let serverPointer else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    let completion = context.phase.ended(cleanly: termination == .REQUEST_TERMINATED_COMPLETED_OK)
    if completion.clientGone { context.clientGone() }
    context.headerDeadline?.awaitNextRequest()
    if let watched = context.ended() { server.watcher.unwatch(watched.fd, id: watched.id) }
    if completion.wasInFlight { server.completed() }
}

/// Each call reports to the request's RequestPhase and carries out what it decides.
let accessHandler: MHD_AccessHandlerCallback = { serverPointer, connection, url, method, _, uploadData, uploadSize, contextSlot in
    guard let serverPointer, let connection, let contextSlot, let uploadSize, let raw = contextSlot.pointee else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()
    let count = uploadSize.pointee
    let upload =
        count > 0
        ? UnsafeBufferPointer(start: UnsafeRawPointer(uploadData)?.assumingMemoryBound(to: UInt8.self), count: count) : nil

    switch context.phase.called(
        upload: upload, draining: server.draining.load(ordering: .acquiring),
        headers: { collectHeaders(connection) })
    {
    case .awaitBody:
        context.headerDeadline?.headerSectionComplete()
        return MHD_Result.YES
    case .refuse(let rejection):
        // Queued on the first call, unlike any other answer: the connection is closed anyway.
        context.headerDeadline?.headerSectionComplete()
        let methodName = method.map { String(cString: $0) } ?? "-"
        server.configuration.onReject?(methodName, url.map { String(cString: $0) } ?? "/", rejection.status, rejection.message)
        var response = server.configuration.rejectResponse(rejection.status, rejection.message)
        response.headers.append(("Connection", "close"))
        return queue(response, on: connection, server: server)
    case .consumeUpload:
        uploadSize.pointee = 0
        return MHD_Result.YES
    case .turnAway:
        var response = server.configuration.drainResponse
        response.headers.append(("Connection", "close"))
        return queue(response, on: connection, server: server)
    case .dispatch(let headers, let body, let bodyTooLarge):
        // Counted before the handler runs: the handler may start work elsewhere (an upstream
        // request) that shutdown must wait for, even before this thread gets to suspend.
        let handle = RequestContext.ConnectionHandle(
            pointer: connection, loop: server.loop(of: connection), suspensions: server.suspensions)
        context.dispatchedOn = handle
        server.inFlight.add(1, ordering: .relaxed)
        handle.loop?.dispatched.add(1, ordering: .relaxed)
        let request = HTTPServerRequest(
            method: method.map { String(cString: $0) } ?? "GET",
            path: url.map { String(cString: $0) } ?? "/",
            rawTarget: context.rawTarget,
            headers: headers,
            body: body,
            bodyTooLarge: bodyTooLarge,
            peer: larder_mhd_client_address(connection).flatMap(PeerAddress.init),
            loop: server.configuration.firstLoopIndex + (handle.loop?.index ?? 0))
        if let response = server.handler.handle(request, responder: HTTPResponder(context: context, server: server)) {
            return queue(response, on: connection, server: server)
        }
        if let ready = context.awaitAnswer(on: handle) { return queue(ready, on: connection, server: server) }
        return MHD_Result.YES
    case .answerIfReady:
        guard let response = context.answer else { return MHD_Result.YES }
        return queue(response, on: connection, server: server)
    }
}

/// The request's header fields with their sizes as parsed, so a NUL inside a name or value is
/// seen (and refused) rather than silently cutting it short.
private func collectHeaders(_ connection: OpaquePointer) -> [(name: String, value: String)] {
    var headers: [(name: String, value: String)] = []
    // One allocation for a usual request's fields rather than one per doubling.
    headers.reserveCapacity(16)
    withUnsafeMutablePointer(to: &headers) { pointer in
        _ = MHD_get_connection_values_n(
            connection, .HEADER_KIND,
            { slot, _, key, keySize, value, valueSize in
                guard let slot, let key else { return MHD_Result.YES }
                let list = slot.assumingMemoryBound(to: [(name: String, value: String)].self)
                func text(_ pointer: UnsafePointer<CChar>?, _ count: Int) -> String {
                    guard let pointer, count > 0 else { return "" }
                    return pointer.withMemoryRebound(to: UInt8.self, capacity: count) {
                        FieldBytes.string(UnsafeBufferPointer(start: $0, count: count))
                    }
                }
                list.pointee.append((text(key, keySize), text(value, valueSize)))
                return MHD_Result.YES
            }, pointer)
    }
    return headers
}

/// Admits every connection: the limits are kept by `Admission`, across all loops.
let acceptAll: MHD_AcceptPolicyCallback = { _, _, _ in MHD_Result.YES }
