// A finished transfer, on the driver's thread: the exchange's answer, a cut download resumed,
// or the next hop of a redirect (RedirectPolicy decides; the driver sends).

import CCurl
import LarderCore
import LarderEngine
import Logging

extension CurlDriver {
    /// Ends `transfer` with libcurl's `result`: answers or fails its exchange, or starts the
    /// exchange's next transfer (a resumed download, a redirect's next hop).
    func finish(_ transfer: Transfer, result: CURLcode) {
        defer { retire(transfer) }
        let exchange = transfer.exchange
        var status = 0
        larder_curl_getinfo_long(transfer.handle, CURLINFO_RESPONSE_CODE, &status)
        guard result == CURLE_OK else {
            if let validator = resumeValidator(exchange, transfer, status: status, result: result) {
                return resume(exchange, after: transfer, status: status, validator: validator)
            }
            return exchange.fail(transfer.error(for: result, timeoutMs: exchange.request.timeoutMs))
        }
        if let partial = exchange.partial {
            // A resumed download: a 206 continuing exactly where the cut was completes it; a 200
            // (the representation changed, If-Range said so) replaces it.
            if status == 206, let range = transfer.headers.first(named: "content-range"),
                range.hasPrefix("bytes \(partial.body.count)-")
            {
                return exchange.succeed(
                    UpstreamResponse(
                        status: 200, headers: partial.headers, body: partial.body + transfer.body,
                        requestTime: exchange.requestTime, responseTime: settings.clock.now()))
            }
            guard status == 200 else {
                return exchange.fail(
                    LarderError(
                        .upstreamError,
                        "\(exchange.url.authority) answered \(status) when a cut download was resumed"))
            }
        }
        let hop = RedirectPolicy.Hop(method: exchange.method, url: exchange.url, headers: exchange.headers, body: exchange.body)
        switch RedirectPolicy.next(
            after: hop, status: status, location: transfer.headers.first(named: "location"),
            hops: exchange.hops, following: exchange.request.followRedirects,
            originBound: exchange.request.originBoundHeaders)
        {
        case .deliver:
            break
        case .follow(let next):
            exchange.hops += 1
            exchange.method = next.method
            exchange.url = next.url
            exchange.headers = next.headers
            exchange.body = next.body
            return begin(exchange)
        case .fail(let error):
            return exchange.fail(error)
        }
        exchange.succeed(
            UpstreamResponse(
                status: status, headers: transfer.headers, body: transfer.body,
                requestTime: exchange.requestTime, responseTime: settings.clock.now()))
    }

    /// Resuming a cut download (YTKNetwork's resumable downloads, RFC 9110 §14.2 and §13.1.5):
    /// only for exchanges that ask for it, a GET whose 200 (or resumed 206) was cut mid-body,
    /// at most 3 times, and only with a validator that makes If-Range safe: a strong ETag, or
    /// Last-Modified. Returns that validator.
    private func resumeValidator(_ exchange: Exchange, _ transfer: Transfer, status: Int, result: CURLcode) -> String? {
        guard exchange.request.resumable, exchange.method == .get, exchange.resumes < 3,
            result == CURLE_PARTIAL_FILE || result == CURLE_RECV_ERROR,
            status == 200 || (status == 206 && exchange.partial != nil), !transfer.body.isEmpty
        else { return nil }
        let headers = exchange.partial?.headers ?? transfer.headers
        if let etag = headers.first(named: "etag"), !etag.hasPrefix("W/") { return etag }
        return headers.first(named: "last-modified")
    }

    private func resume(_ exchange: Exchange, after transfer: Transfer, status: Int, validator: String) {
        if status == 206, let partial = exchange.partial {
            exchange.partial = (partial.headers, partial.body + transfer.body)
        } else {
            exchange.partial = (transfer.headers, transfer.body)
        }
        exchange.resumes += 1
        exchange.headers.removeAll { $0.name.caseInsensitiveEquals("range") || $0.name.caseInsensitiveEquals("if-range") }
        exchange.headers.append(HeaderField("Range", "bytes=\(exchange.partial!.body.count)-"))
        exchange.headers.append(HeaderField("If-Range", validator))
        settings.logger.debug(
            "resuming a cut download",
            metadata: [
                "url": "\(settings.redaction.apply(exchange.url.absoluteString))",
                "from": "\(exchange.partial!.body.count)",
                "request_id": "\(exchange.headers.first(named: "x-request-id") ?? "-")"
            ])
        begin(exchange)
    }
}
