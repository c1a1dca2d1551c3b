// How much more often than the main queue's next victim an object must have been asked for to
// enter the main queue from the small one unasked (S3FIFO.admitsByFrequency): the bar that
// TinyLFU's admission sets, tuned online by hill climbing on the hit rate (Caffeine tunes its
// window the same way, from the sampled hit rate). A high bar keeps the proven objects against
// newcomers whose counts are a little inflated by the sketch's noise; a low one lets in objects
// that come back regularly but rarely, such as a loop over more objects than fit, which a fixed
// bar of 2 kept out. Each sample of requests, the bar takes a step; a step after which the hit
// rate fell (by more than noise) turns the climb around. Pure.

public struct AdmissionBar: Sendable, Equatable {
    /// The bar now: the candidate's estimate must reach the victim's plus this.
    public private(set) var margin: Int
    /// 1: asked for more often than the victim at all; 3: by a clear margin.
    public static let range = 1...3
    /// Requests per sample: enough that the hit rates of two samples can be compared.
    public let sampleRequests: Int
    /// A change of hit rate smaller than this is noise: it keeps the direction.
    public static let noise = 0.005

    private var direction = -1
    private var hits = 0
    private var requests = 0
    private var previousRate: Double?

    public init(margin: Int = 2, sampleRequests: Int = 4096) {
        self.margin = min(max(margin, Self.range.lowerBound), Self.range.upperBound)
        self.sampleRequests = max(1, sampleRequests)
    }

    /// One request, a hit or not. At the end of a sample, the bar moves.
    public mutating func record(hit: Bool) {
        requests += 1
        if hit { hits += 1 }
        guard requests >= sampleRequests else { return }
        let rate = Double(hits) / Double(requests)
        hits = 0
        requests = 0
        if let previousRate, rate < previousRate - Self.noise { direction = -direction }
        previousRate = rate
        var next = margin + direction
        if !Self.range.contains(next) {
            // At an end of the range: the climb turns there.
            direction = -direction
            next = margin + direction
        }
        margin = next
    }
}
