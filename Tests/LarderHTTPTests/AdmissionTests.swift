// Admission: connections open against the server's limits, in all and per client address.

import XCTest

@testable import LarderHTTP

#if canImport(Glibc)
    import Glibc
#endif

final class AdmissionTests: XCTestCase {
    /// An IPv4 client address with a port (the port is not part of it).
    private func client(_ address: String, port: UInt16 = 40_000) -> ClientAddress {
        var storage = sockaddr_storage()
        withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { socket in
                socket.pointee.sin_family = sa_family_t(AF_INET)
                socket.pointee.sin_port = port.bigEndian
                _ = inet_pton(AF_INET, address, &socket.pointee.sin_addr)
            }
        }
        return ClientAddress(storage)
    }

    private func client6(_ address: String) -> ClientAddress {
        var storage = sockaddr_storage()
        withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { socket in
                socket.pointee.sin6_family = sa_family_t(AF_INET6)
                _ = inet_pton(AF_INET6, address, &socket.pointee.sin6_addr)
            }
        }
        return ClientAddress(storage)
    }

    func testClientAddressIsTheIPAddressWithoutThePort() {
        XCTAssertEqual(client("192.0.2.1", port: 1), client("192.0.2.1", port: 2))
        XCTAssertNotEqual(client("192.0.2.1"), client("192.0.2.2"))
        XCTAssertEqual(client("192.0.2.1").bytes, [192, 0, 2, 1])
        XCTAssertEqual(client6("2001:db8::1").bytes.count, 16)
        XCTAssertNotEqual(client6("2001:db8::1"), client6("2001:db8::2"))
    }

    func testLimitInAllIsKeptAcrossAddresses() {
        var admission = Admission(limit: 2)
        XCTAssertTrue(admission.admit(client("192.0.2.1"), perAddress: 0))
        XCTAssertTrue(admission.admit(client("192.0.2.2"), perAddress: 0))
        XCTAssertFalse(admission.admit(client("192.0.2.3"), perAddress: 0))
        XCTAssertEqual(admission.open, 2)
        admission.release(client("192.0.2.1"))
        XCTAssertEqual(admission.open, 1)
        XCTAssertTrue(admission.admit(client("192.0.2.3"), perAddress: 0))
    }

    func testLimitPerAddressLeavesOtherAddressesIn() {
        var admission = Admission(limit: 10)
        XCTAssertTrue(admission.admit(client("192.0.2.1", port: 1), perAddress: 2))
        XCTAssertTrue(admission.admit(client("192.0.2.1", port: 2), perAddress: 2))
        XCTAssertFalse(admission.admit(client("192.0.2.1", port: 3), perAddress: 2))
        XCTAssertTrue(admission.admit(client("192.0.2.2"), perAddress: 2))
        XCTAssertEqual(admission.open, 3)
        admission.release(client("192.0.2.1"))
        XCTAssertTrue(admission.admit(client("192.0.2.1"), perAddress: 2))
    }

    func testZeroPerAddressMeansNoLimitPerAddress() {
        var admission = Admission(limit: 100)
        for _ in 0..<100 { XCTAssertTrue(admission.admit(client("192.0.2.1"), perAddress: 0)) }
        XCTAssertFalse(admission.admit(client("192.0.2.1"), perAddress: 0), "the limit in all still holds")
    }

    func testReleasingTheLastConnectionOfAnAddressForgetsIt() {
        var admission = Admission(limit: 10)
        _ = admission.admit(client("192.0.2.1"), perAddress: 1)
        admission.release(client("192.0.2.1"))
        XCTAssertTrue(admission.perAddress.isEmpty)
        XCTAssertEqual(admission.open, 0)
    }

    func testReleasingAnAddressNeverAdmittedChangesNothing() {
        var admission = Admission(limit: 10)
        _ = admission.admit(client("192.0.2.1"), perAddress: 0)
        admission.release(client("192.0.2.9"))
        XCTAssertEqual(admission.open, 1)
    }
}
