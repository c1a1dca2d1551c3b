import LarderCore
import XCTest

final class OwnListenersTests: XCTestCase {
    private func ip(_ bytes: UInt8...) -> IPAddress { IPAddress(bytes: bytes)! }
    private let v6Loopback = IPAddress(bytes: [UInt8](repeating: 0, count: 15) + [1])!
    private let nowhere: (IPAddress) -> Bool = { _ in false }

    func testAListenerOnOneAddressIsReachedOnThatAddressAndTheUnspecifiedOnes() {
        let listeners = OwnListeners()
        listeners.add(ListenerEndpoint(name: "admin", address: ip(127, 0, 0, 1), port: 9090))
        XCTAssertNotNil(listeners.refusal(address: ip(127, 0, 0, 1), port: 9090, isLocal: nowhere))
        XCTAssertNotNil(listeners.refusal(address: ip(0, 0, 0, 0), port: 9090, isLocal: nowhere))
        XCTAssertNotNil(listeners.refusal(address: IPAddress(bytes: [UInt8](repeating: 0, count: 16))!, port: 9090, isLocal: nowhere))
        XCTAssertNotNil(
            listeners.refusal(
                address: IPAddress(bytes: [UInt8](repeating: 0, count: 10) + [0xFF, 0xFF, 127, 0, 0, 1])!,
                port: 9090, isLocal: nowhere), "IPv4-mapped")
        XCTAssertNil(listeners.refusal(address: ip(127, 0, 0, 1), port: 9091, isLocal: nowhere), "another port")
        XCTAssertNil(listeners.refusal(address: ip(127, 0, 0, 2), port: 9090, isLocal: nowhere), "another loopback address")
        XCTAssertEqual(
            listeners.refusal(address: ip(127, 0, 0, 1), port: 9090, isLocal: nowhere),
            "127.0.0.1:9090 is this Larder instance's own admin listener")
    }

    func testAWildcardListenerIsReachedOnEveryLocalAddress() {
        let listeners = OwnListeners()
        listeners.add(ListenerEndpoint(name: "main", address: ip(0, 0, 0, 0), port: 8080))
        XCTAssertNotNil(listeners.refusal(address: ip(127, 9, 9, 9), port: 8080, isLocal: nowhere))
        XCTAssertNotNil(listeners.refusal(address: v6Loopback, port: 8080, isLocal: nowhere))
        XCTAssertNil(listeners.refusal(address: ip(10, 1, 2, 3), port: 8080, isLocal: nowhere), "not an address of this machine")
        XCTAssertNotNil(listeners.refusal(address: ip(10, 1, 2, 3), port: 8080, isLocal: { $0 == self.ip(10, 1, 2, 3) }))
        var asked = 0
        XCTAssertNil(
            listeners.refusal(
                address: ip(10, 1, 2, 3), port: 8081,
                isLocal: { _ in
                    asked += 1
                    return true
                }))
        XCTAssertEqual(asked, 0, "interfaces are read only for a listener's port")
    }

    func testThePolicyRefusesOwnListenersWhateverDenyPrivateSays() {
        let listeners = OwnListeners()
        listeners.add(ListenerEndpoint(name: "proxy", address: ip(127, 0, 0, 1), port: 8081))
        let open = UpstreamAccessPolicy(denyPrivate: false, ownListeners: listeners)
        XCTAssertNotNil(open.refusal(forAddress: ip(127, 0, 0, 1), port: 8081, isLocal: nowhere))
        XCTAssertNil(open.refusal(forAddress: ip(127, 0, 0, 1), port: 8082, isLocal: nowhere))
        XCTAssertNotNil(open.refusal(forAddress: ip(169, 254, 169, 254), port: 80, isLocal: nowhere), "the other rules still apply")
    }
}
