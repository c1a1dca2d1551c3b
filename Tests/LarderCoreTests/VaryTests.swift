import LarderCore
import XCTest

final class VaryTests: XCTestCase {
    private let keys = CacheKeyBuilder(secret: Array(repeating: 3, count: 32))

    func testNominatedNames() {
        XCTAssertEqual(Vary.names(in: []), [])
        XCTAssertEqual(
            Vary.names(in: [HeaderField("Vary", "Accept-Language, accept-encoding"), HeaderField("vary", "Accept-Language")]),
            ["accept-encoding", "accept-language"])
        XCTAssertNil(Vary.names(in: [HeaderField("Vary", "Accept, *")]))
        XCTAssertEqual(Vary.names(in: [HeaderField("Vary", " ")]), [])
    }

    func testSelectingValuesAreNormalised() {
        func fingerprint(_ headers: [(String, String)]) -> String {
            keys.variantFingerprint(names: ["accept-language"], request: headers.map { HeaderField($0.0, $0.1) })
        }
        let reference = fingerprint([("Accept-Language", "en, fr")])
        XCTAssertEqual(fingerprint([("accept-language", "en,fr")]), reference, "names case-insensitive, spaces around commas")
        XCTAssertEqual(fingerprint([("Accept-Language", "en"), ("Accept-Language", "fr")]), reference, "combined field lines")
        XCTAssertEqual(fingerprint([("Accept-Language", "en,   fr")]), reference)
        XCTAssertEqual(fingerprint([("Accept-Language", "fr, en")]), reference, "order carries no meaning in Accept-Language")
        XCTAssertEqual(fingerprint([("Accept-Language", " EN ,   Fr")]), reference, "nor case")
        XCTAssertNotEqual(fingerprint([("Accept-Language", "en;q=0.5, fr")]), reference, "q-values do")
        let other = { (value: String) in self.keys.variantFingerprint(names: ["x-list"], request: [HeaderField("X-List", value)]) }
        XCTAssertNotEqual(other("a, b"), other("b, a"), "order matters in a field Larder does not know")
        XCTAssertNotEqual(fingerprint([]), fingerprint([("Accept-Language", "")]), "absent differs from empty")
        XCTAssertEqual(fingerprint([("X-Other", "1")]), fingerprint([]), "other fields do not count")
    }

    func testFingerprintsDoNotRevealValues() {
        let fingerprint = keys.variantFingerprint(names: ["authorization"], request: [HeaderField("Authorization", "Bearer secret")])
        XCTAssertEqual(fingerprint.count, 64)
        XCTAssertFalse(fingerprint.contains("secret"))
    }
}
