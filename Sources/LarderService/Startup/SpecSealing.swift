// The key warm-job specs are sealed with at rest, derived from the instance secret.

import Crypto

/// Seals warm-job specs at rest (they may carry Authorization, cookies or `sensitive` values):
/// AES-GCM under a key derived from the instance secret with HKDF.
struct SpecSealing: Sendable {
    private let keyBytes: [UInt8]

    init(secret: [UInt8]) {
        let key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: secret), info: Array("larder-warm-jobs/1".utf8),
            outputByteCount: 32)
        keyBytes = key.withUnsafeBytes { Array($0) }
    }

    func seal(_ bytes: [UInt8]) -> [UInt8] {
        // AES-GCM with a random nonce cannot fail for in-memory input of this size.
        guard let box = try? AES.GCM.seal(bytes, using: SymmetricKey(data: keyBytes)), let combined = box.combined else { return [] }
        return Array(combined)
    }

    func open(_ bytes: [UInt8]) -> [UInt8]? {
        guard let box = try? AES.GCM.SealedBox(combined: bytes),
            let opened = try? AES.GCM.open(box, using: SymmetricKey(data: keyBytes))
        else { return nil }
        return Array(opened)
    }
}
