// When the certificates of a PEM file are valid: the notBefore and notAfter of each one's
// Validity (RFC 5280 §4.1.2.5), read from its DER with swift-asn1. GnuTLS serves an expired
// certificate without a word, and clients refuse it: Larder warns at start, on reload and in
// check-config instead.

import Foundation
import SwiftASN1

#if canImport(Glibc)
    import Glibc
#endif

struct CertificateValidity: Equatable {
    let notBefore: Date
    let notAfter: Date

    /// The validity of each certificate in `pem`, in file order (the server's first, then its
    /// chain). Throws when a CERTIFICATE block is not a DER certificate.
    static func of(pem: String) throws -> [CertificateValidity] {
        try PEMDocument.parseMultiple(pemString: pem).filter { $0.discriminator == "CERTIFICATE" }.map { try of(der: $0.derBytes) }
    }

    /// Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }, and in
    /// TBSCertificate: [0] version (optional), serialNumber, signature, issuer, validity, …
    static func of(der: [UInt8]) throws -> CertificateValidity {
        let certificate = try DER.parse(der)
        return try DER.sequence(certificate, identifier: .sequence) { parts in
            guard let toBeSigned = parts.next() else { throw ASN1Error.invalidASN1Object(reason: "no tbsCertificate") }
            while parts.next() != nil {}
            return try DER.sequence(toBeSigned, identifier: .sequence) { fields in
                var field = fields.next()
                if field?.identifier.tagClass == .contextSpecific { field = fields.next() }
                // field: the serial number; then the signature algorithm and the issuer.
                _ = fields.next()
                _ = fields.next()
                guard field != nil, let validity = fields.next() else { throw ASN1Error.invalidASN1Object(reason: "no validity") }
                while fields.next() != nil {}
                return try DER.sequence(validity, identifier: .sequence) { times in
                    CertificateValidity(notBefore: try time(times.next()), notAfter: try time(times.next()))
                }
            }
        }
    }

    /// Time ::= CHOICE { utcTime UTCTime, generalTime GeneralizedTime }, both in UTC.
    private static func time(_ node: ASN1Node?) throws -> Date {
        guard let node else { throw ASN1Error.invalidASN1Object(reason: "a validity time is missing") }
        let fields: (year: Int, month: Int, day: Int, hours: Int, minutes: Int, seconds: Int)
        switch node.identifier {
        case .utcTime:
            let time = try UTCTime(derEncoded: node)
            fields = (time.year, time.month, time.day, time.hours, time.minutes, time.seconds)
        case .generalizedTime:
            let time = try GeneralizedTime(derEncoded: node)
            fields = (time.year, time.month, time.day, time.hours, time.minutes, time.seconds)
        default:
            throw ASN1Error.unexpectedFieldType(node.identifier)
        }
        var broken = tm()
        broken.tm_year = Int32(fields.year - 1900)
        broken.tm_mon = Int32(fields.month - 1)
        broken.tm_mday = Int32(fields.day)
        broken.tm_hour = Int32(fields.hours)
        broken.tm_min = Int32(fields.minutes)
        broken.tm_sec = Int32(fields.seconds)
        return Date(timeIntervalSince1970: TimeInterval(timegm(&broken)))
    }

    /// Why the certificates in the file at `path` (holding `pem`) cannot be used at `now`, one
    /// sentence for each that is expired or not yet valid; a file it cannot read says so.
    static func problems(pem: String, path: String, now: Date = Date()) -> [String] {
        let validities: [CertificateValidity]
        do {
            validities = try of(pem: pem)
        } catch {
            return ["cannot read the validity of the TLS certificate \(path) (\(error)); clients check it"]
        }
        let format = ISO8601DateFormatter()
        return validities.enumerated().compactMap { index, validity in
            let which = index == 0 ? "the TLS certificate \(path)" : "certificate \(index + 1) of the chain in \(path)"
            if now > validity.notAfter {
                return "\(which) expired on \(format.string(from: validity.notAfter)): clients refuse it; renew it"
            }
            if now < validity.notBefore {
                return "\(which) is not valid before \(format.string(from: validity.notBefore)): clients refuse it until then"
            }
            return nil
        }
    }
}
