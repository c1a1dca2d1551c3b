/// A listener's certificate (chain) and private key, PEM, as read from their files; `certificateName`
/// and `keyName` (the files' paths) name them in errors.
public struct TLSIdentity: Sendable {
    public var certificate: String
    public var key: String
    public var certificateName: String
    public var keyName: String

    public init(certificate: String, key: String, certificateName: String = "the certificate", keyName: String = "the key") {
        self.certificate = certificate
        self.key = key
        self.certificateName = certificateName
        self.keyName = keyName
    }
}
