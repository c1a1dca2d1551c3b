// The listeners' certificate and key files: read at start and again on each rotation
// (`LarderService.reloadCertificates()`), checked before any listener uses them, each failure
// naming its file.

import Foundation
import LarderHTTP

#if canImport(Glibc)
    import Glibc
#endif

enum TLSFiles {
    /// Files larger than this are no certificate chain or key (a wrong path: a log, a database).
    static let largestFile = 1 << 20

    /// The certificate (chain) and key at these paths, checked: both readable PEM, an
    /// unencrypted key, and libmicrohttpd (GnuTLS) can serve with them together.
    static func load(certificate certificatePath: String, key keyPath: String) throws -> TLSIdentity {
        let certificate = try read(certificatePath, what: "certificate")
        let key = try read(keyPath, what: "private key")
        guard certificate.contains("-----BEGIN CERTIFICATE-----") else {
            throw ConfigurationError("the TLS certificate \(certificatePath) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        guard key.contains("PRIVATE KEY-----") else {
            throw ConfigurationError("the TLS private key \(keyPath) holds no PEM private key (-----BEGIN … PRIVATE KEY-----)")
        }
        if key.contains("ENCRYPTED PRIVATE KEY") || key.contains("Proc-Type: 4,ENCRYPTED") {
            throw ConfigurationError(
                "the TLS private key \(keyPath) is encrypted; give it unencrypted (`openssl pkey -in \(keyPath) -out key.pem`), "
                    + "readable by Larder only")
        }
        let identity = TLSIdentity(certificate: certificate, key: key, certificateName: certificatePath, keyName: keyPath)
        do {
            try HTTPServer.check(identity)
        } catch {
            throw ConfigurationError(
                "the TLS certificate \(certificatePath) and key \(keyPath) cannot be used together: \(error.description)")
        }
        return identity
    }

    /// A file's text; throws naming it.
    private static func read(_ path: String, what: String) throws -> String {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw ConfigurationError("cannot read the TLS \(what) \(path) (\(String(cString: strerror(errno))))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else { throw ConfigurationError("the TLS \(what) \(path) is not a regular file") }
        guard Int(status.st_size) <= largestFile else {
            throw ConfigurationError("the TLS \(what) \(path) is larger than \(largestFile >> 20) MiB: not a PEM file")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError("cannot read the TLS \(what) \(path) (\(String(cString: strerror(errno))))")
        }
        return String(decoding: data, as: UTF8.self)
    }
}
