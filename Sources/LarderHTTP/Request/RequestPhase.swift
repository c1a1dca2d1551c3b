// What libmicrohttpd's access-handler calls for one request decide, from its header section to
// its end: a pure state machine (events in, actions out, as async-http-client's
// HTTPRequestStateMachine), fed by the access handler and requestCompleted
// (LibMicroHTTPDCallbacks), which carry out its actions. It runs on the connection's loop
// thread only: libmicrohttpd serialises the calls for a connection.
//
// libmicrohttpd calls the access handler
//   1. once when the header section is complete, with no body: the section is checked
//      (RequestFraming: RFC 9112 §6.1, §6.3) and a refused one is answered at once, its
//      connection closed; an accepted one is never answered on this call (keep-alive is lost);
//   2. once per chunk of body: kept up to `maxBodyBytes`; past it, what was kept is let go of,
//      the rest is discarded and the request is marked `bodyTooLarge`;
//   3. once with no data, the body complete: the request is handed to the handler, or, while
//      the server drains, answered with the drain response and its connection closed;
//   4. again after its connection was resumed (the answer came from another thread,
//      ResponseHandOver): the answer is queued.
// Then requestCompleted, once, however the request ended.

import LarderCore

struct RequestPhase {
    enum Stage: Equatable {
        /// Waiting for the first call (the header section).
        case headers
        /// The header section was accepted; reading the body.
        case body
        /// The header section was refused; whatever else arrives is dropped.
        case refused
        /// The body is complete: handed to the handler, or turned away while draining.
        case dispatched
        /// libmicrohttpd ended the request.
        case completed
    }

    /// What the access handler does for the call it reported.
    enum Action {
        /// The header section was accepted: wait for the body (answer nothing yet).
        case awaitBody
        /// The header section is refused: answer with this and close the connection.
        case refuse(RequestFraming.Rejection)
        /// The chunk of body was taken (kept or dropped): tell libmicrohttpd so.
        case consumeUpload
        /// The server is draining: answer with the drain response and close the connection;
        /// the handler never sees the request.
        case turnAway
        /// Hand the request to the handler; it is in flight until it completes.
        case dispatch(headers: [(name: String, value: String)], body: [UInt8], bodyTooLarge: Bool)
        /// Called again after the connection was resumed: queue the answer if it is there.
        case answerIfReady
    }

    /// What requestCompleted does.
    struct Completion: Equatable {
        /// The request did not end with its response sent: the client went away.
        let clientGone: Bool
        /// It had been handed to the handler: it no longer counts as in flight.
        let wasInFlight: Bool
    }

    /// Bodies larger than this are not kept (`bodyTooLarge`).
    let maxBodyBytes: Int
    private(set) var stage: Stage = .headers
    /// The request was handed to the handler (counted in `HTTPServer.inFlight` until it completes).
    private(set) var inFlight = false
    private(set) var bodyTooLarge = false
    private var headers: [(name: String, value: String)] = []
    private var body: [UInt8] = []

    init(maxBodyBytes: Int) {
        self.maxBodyBytes = maxBodyBytes
    }

    /// libmicrohttpd called the access handler: `upload` is the chunk of body it brings (nil
    /// when it brings none), `draining` whether the server turns new requests away (read only
    /// when the body is complete), `readHeaders` the request's header fields (read only on the
    /// first call).
    mutating func called(
        upload: UnsafeBufferPointer<UInt8>?, draining: @autoclosure () -> Bool,
        headers readHeaders: () -> [(name: String, value: String)]
    ) -> Action {
        switch stage {
        case .headers:
            let fields = readHeaders()
            if let rejection = RequestFraming.check(fields) {
                stage = .refused
                return .refuse(rejection)
            }
            headers = fields
            stage = .body
            return .awaitBody
        case .refused:
            return .consumeUpload
        case .body:
            if let upload {
                bodyReceived(upload)
                return .consumeUpload
            }
            stage = .dispatched
            if draining() { return .turnAway }
            inFlight = true
            defer {
                headers = []
                body = []
            }
            return .dispatch(headers: headers, body: body, bodyTooLarge: bodyTooLarge)
        case .dispatched, .completed:
            return .answerIfReady
        }
    }

    /// libmicrohttpd ended the request; `cleanly`: with its response sent.
    mutating func ended(cleanly: Bool) -> Completion {
        let wasInFlight = inFlight
        inFlight = false
        stage = .completed
        return Completion(clientGone: !cleanly, wasInFlight: wasInFlight)
    }

    /// Once too large, nothing more is kept, however small the later chunks.
    private mutating func bodyReceived(_ chunk: UnsafeBufferPointer<UInt8>) {
        if body.count + chunk.count > maxBodyBytes {
            bodyTooLarge = true
            body = []
        } else if !bodyTooLarge {
            body.append(contentsOf: chunk)
        }
    }
}
