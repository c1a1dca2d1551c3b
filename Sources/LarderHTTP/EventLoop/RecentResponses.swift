import CMicroHTTPD
import LarderSync

/// The last few responses one event loop handed to libmicrohttpd, queued again to a later
/// connection whose answer is the same: the same status, the same fields in the same order, and
/// the same body storage (kept here, so the same address is the same bytes). libmicrohttpd
/// lets one response go to many connections (it counts its uses and adds the per-connection
/// fields itself), and a hot URL's answer is the same for every hit within a second (its Age
/// changes each second): building it again, the response and a copy of each field, is a
/// sizeable share of such a hit's work. Byte bodies only, up to `maxBodyBytes`, a few
/// responses, each kept at most `keptNanoseconds`: it never holds much. Used on its loop's
/// thread only.
final class RecentResponses {
    private struct Kept {
        /// What it was built from; its body is kept too, so that the storage responses are
        /// compared by cannot be reused meanwhile.
        let answer: HTTPServerResponse
        let response: OpaquePointer
        let keptAt: UInt64
    }

    static let capacity = 4
    static let maxBodyBytes = 64 << 10
    static let keptNanoseconds: UInt64 = 2_000_000_000
    /// A ring of `capacity` slots, `next` the one written next (the oldest once full): keeping a
    /// response replaces one slot, with no array shifted or filtered.
    private var kept: [Kept?] = Array(repeating: nil, count: capacity)
    private var next = 0
    /// Responses queued again; this loop's own count (a count shared by the loops would move
    /// between their cores on every hot hit), read by others for tests.
    let reuses = Atomic<Int>(0)

    /// Whether a response could be kept: one that may repeat, with a body of bytes (not a file,
    /// a stream or a HEAD's announced length), small enough.
    static func mayKeep(_ response: HTTPServerResponse) -> Bool {
        !response.isUnique && response.stream == nil && response.file == nil && response.headContentLength == nil
            && response.body.count <= maxBodyBytes
    }

    /// A kept response that is `response`, if any (kept no longer than `keptNanoseconds`).
    func find(_ response: HTTPServerResponse, now: UInt64) -> OpaquePointer? {
        // Newest first.
        for step in 1...Self.capacity {
            guard let candidate = kept[(next - step + Self.capacity) % Self.capacity] else { continue }
            guard
                candidate.answer.status == response.status
                    && candidate.answer.headers.count == response.headers.count
                    && now &- candidate.keptAt < Self.keptNanoseconds
                    && Self.sameStorage(candidate.answer.body, response.body)
            else { continue }
            let sameFields = zip(candidate.answer.headers, response.headers).allSatisfy { $0.name == $1.name && $0.value == $1.value }
            if sameFields {
                reuses.add(1, ordering: .relaxed)
                return candidate.response
            }
        }
        return nil
    }

    /// Keeps `mhdResponse` (this reference to it) for `response`, letting go of the oldest and
    /// of those kept too long.
    func keep(_ response: HTTPServerResponse, _ mhdResponse: OpaquePointer, now: UInt64) {
        for index in kept.indices {
            guard let old = kept[index], now &- old.keptAt >= Self.keptNanoseconds else { continue }
            MHD_destroy_response(old.response)
            kept[index] = nil
        }
        if let oldest = kept[next] { MHD_destroy_response(oldest.response) }
        kept[next] = Kept(answer: response, response: mhdResponse, keptAt: now)
        next = (next + 1) % Self.capacity
    }

    private static func sameStorage(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.withUnsafeBufferPointer { a in b.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress && a.count == b.count } }
    }

    deinit {
        for old in kept.compactMap({ $0 }) { MHD_destroy_response(old.response) }
    }
}
