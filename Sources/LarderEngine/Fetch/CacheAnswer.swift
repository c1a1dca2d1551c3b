public import LarderCore

/// What the engine answers with: a response (from the cache or the upstream) and how it was
/// obtained, or a failure. The routes render it: /fetch as the JSON envelope, /proxy as is.
public enum CacheAnswer: Sendable {
    case served(ServedResponse)
    case failed(LarderError)

    public var outcome: CacheOutcome? {
        if case .served(let response) = self { return response.report.outcome }
        return nil
    }
}
