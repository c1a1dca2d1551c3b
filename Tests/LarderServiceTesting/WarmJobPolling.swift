// Warm jobs as tests drive them: start one with POST /cache/warm, and poll the API until an
// answer says what the test waits for (Larder offers no event to wait on), within a bound.

import Foundation

extension IntegrationTestCase {
    /// POST /cache/warm with a JSON object.
    public func postWarmJob(_ client: TestConnection, _ object: [String: Any]) throws -> TestResponse {
        try client.request(
            "POST", "/cache/warm", headers: ["Content-Type": "application/json"],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    /// Polls GET `target` until `predicate` holds for its answer, or `timeout` seconds pass;
    /// the last answer either way.
    public func awaitAnswer(
        _ port: Int, _ target: String, timeout: Double = 20, until predicate: (TestResponse) -> Bool
    ) throws -> TestResponse {
        try eventually(timeout: timeout, every: 0.02, { try TestConnection(port: port).request("GET", target) }, until: predicate)
    }

    /// Polls the job until `predicate` holds for its state, or `timeout` seconds pass.
    public func awaitWarmJob(
        _ port: Int, _ id: String, timeout: Double = 20, until predicate: ([String: Any]) -> Bool
    ) throws -> [String: Any] {
        try awaitAnswer(port, "/cache/warm/\(id)", timeout: timeout) { predicate($0.json) }.json
    }
}
