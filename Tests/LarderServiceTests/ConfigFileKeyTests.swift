// The config file's keys come from one table (Setting.all): each must set a field of
// LarderConfiguration, and the fields no key sets are named here.

import Foundation
import XCTest

@testable import LarderService

final class ConfigFileKeyTests: XCTestCase {
    /// Values of every shape a key takes; for each key, one of them must apply and change a field.
    private let candidates: [Any] = [
        "sample-value", 12_345, true, false, 1.5, ["sample-value"], "rename", "pass-through",
        [["name": "sample", "baseUrl": "http://127.0.0.1:9/"]], ["404": "30s"], ["sample": ["maxBytes": "2MiB"]]
    ]

    func testEveryKeySetsAFieldAndOnlyTheNamedFieldsHaveNoKey() throws {
        let defaults = fields(of: LarderConfiguration())
        var set: Set<String> = []
        XCTAssertEqual(Set(Setting.all.map(\.key)).count, Setting.all.count, "a key is in the table twice")
        for setting in Setting.all {
            var changed: Set<String> = []
            for candidate in candidates {
                var configuration = LarderConfiguration()
                do {
                    try ConfigFile.apply(text: json([setting.key: candidate]), source: "test", to: &configuration)
                } catch {
                    continue
                }
                let now = fields(of: configuration)
                changed.formUnion(now.keys.filter { now[$0] != defaults[$0] })
            }
            XCTAssertEqual(changed.count, 1, "\(setting.key) sets \(changed.sorted())")
            set.formUnion(changed)
        }
        // Settable only from Swift (tests), not by an operator.
        XCTAssertEqual(Set(defaults.keys).subtracting(set), ["maxRequestBodyBytes", "trafficHistorySeconds"])
    }

    private func fields(of configuration: LarderConfiguration) -> [String: String] {
        var fields: [String: String] = [:]
        for child in Mirror(reflecting: configuration).children {
            if let label = child.label { fields[label] = String(reflecting: child.value) }
        }
        return fields
    }

    private func json(_ object: [String: Any]) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }
}
