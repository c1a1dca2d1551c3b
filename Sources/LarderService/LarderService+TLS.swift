// TLS on the listeners: the certificates read at start, their rotation while serving, and the
// warning for bearer tokens sent in plaintext.
//
// One pair (--tls-cert, --tls-key) serves every listener; the admin listener may have its own
// (--admin-tls-cert, --admin-tls-key), because it is often reached under another name (an
// internal one) and certified by another CA (a private one) than the listeners applications
// call, or is the only listener that leaves the machine. The proxy listener serves the same
// clients as the main one, so it shares the main pair.

import LarderHTTP

/// The certificates of the listeners: the main and proxy listeners', and the admin listener's.
struct ListenerCertificates {
    var main: TLSIdentity?
    var admin: TLSIdentity?
    /// A sentence for each certificate that is expired or not yet valid now: served all the same
    /// (an operator may be replacing it), but clients will refuse it.
    var warnings: [String] = []

    /// Reads and checks the configured files (see TLSFiles), the admin pair falling back to the
    /// main one. Throws naming the file at fault.
    init(_ configuration: LarderConfiguration) throws {
        if (configuration.tlsCertificatePath != nil || configuration.adminTLSCertificatePath != nil) && !HTTPServer.supportsTLS {
            throw ConfigurationError(
                "--tls-cert is given, but this libmicrohttpd was built without TLS (MHD_FEATURE_TLS): install one built with GnuTLS")
        }
        if let certificate = configuration.tlsCertificatePath, let key = configuration.tlsKeyPath {
            main = try TLSFiles.load(certificate: certificate, key: key)
        }
        if let certificate = configuration.adminTLSCertificatePath, let key = configuration.adminTLSKeyPath {
            admin = try TLSFiles.load(certificate: certificate, key: key)
        } else {
            admin = main
        }
        let identities = [main, configuration.adminTLSCertificatePath == nil ? nil : admin].compactMap { $0 }
        warnings = identities.flatMap { CertificateValidity.problems(pem: $0.certificate, path: $0.certificateName) }
    }
}

extension LarderService {
    /// Reads and checks the files `configuration` names that start reads (the TLS certificates
    /// and keys), as start would; for `larder check-config`. Returns what start would warn of
    /// (a certificate expired or not yet valid).
    public static func checkFiles(_ configuration: LarderConfiguration) throws -> [String] {
        try ListenerCertificates(configuration).warnings
    }

    /// Reads the configured certificate and key files again and installs them: connections
    /// accepted from then on get the new certificates; those open keep theirs until they close
    /// (HTTPServer.reloadCertificates). Every file is read and checked before any listener
    /// changes, so a failure (a file unreadable, not PEM, a key that is not the certificate's)
    /// throws an error naming the file and leaves every listener with its certificate. Without
    /// TLS configured, does nothing. Not concurrently with `shutdown`.
    public func reloadCertificates() throws {
        guard configuration.tlsCertificatePath != nil || configuration.adminTLSCertificatePath != nil else { return }
        let certificates = try ListenerCertificates(configuration)
        for warning in certificates.warnings { logger.warning("\(warning)") }
        let running = self.running
        let listeners: [(HTTPServer?, TLSIdentity?)] = [
            (running?.server, certificates.main), (running?.proxyServer, certificates.main), (running?.adminServer, certificates.admin)
        ]
        for case (let server?, let identity?) in listeners where server.isTLS {
            do {
                try server.reloadCertificates(identity)
            } catch {
                throw ConfigurationError("cannot install the TLS certificate \(identity.certificateName): \(error.description)")
            }
        }
        logger.info(
            "TLS certificates reloaded from \(Set(listeners.compactMap { $0.1?.certificateName }).sorted().joined(separator: ", "))")
    }

    /// Warns when a bearer token (the admin token, the metrics token: either can be read off the
    /// wire and replayed) goes to a plaintext listener that is not bound to loopback.
    func warnOfPlaintextTokens(adminListener: HTTPServer) {
        guard !adminListener.isTLS, !Self.isLoopback(configuration.host) else { return }
        let tokens = [
            configuration.adminToken.map { _ in "the admin token (--admin-token)" },
            configuration.metricsToken.map { _ in "the metrics token (--metrics-token)" }
        ].compactMap { $0 }
        guard !tokens.isEmpty else { return }
        let remedy =
            configuration.adminPort == nil
            ? "--tls-cert and --tls-key" : "--tls-cert and --tls-key, or --admin-tls-cert and --admin-tls-key for the admin port alone"
        logger.warning(
            """
            \(tokens.joined(separator: " and ")) \(tokens.count > 1 ? "are" : "is") sent in plaintext to \
            \(configuration.host):\(adminListener.port), which is not loopback: anyone on the path can read and replay \
            \(tokens.count > 1 ? "them" : "it"); serve it over TLS (\(remedy)) or bind it to loopback
            """)
    }

    /// How the log names a listener: `https://HOST:PORT` with TLS, `HOST:PORT` without.
    func address(of listener: HTTPServer) -> String {
        (listener.isTLS ? "https://" : "") + "\(configuration.host):\(listener.port)"
    }
}
