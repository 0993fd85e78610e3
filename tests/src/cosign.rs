//! Cosign signatures made for the tests, as `cosign sign --key` makes them: an ECDSA P-256 key
//! (`cosign generate-key-pair`'s kind), a "simple signing" payload naming the signed manifest's
//! digest, signed with ring (the library the node verifies with), and stored in the registry
//! under the tag `sha256-<hex>.sig` (see [`crate::registry::Registry::push_signature`]).

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};

/// The DER of a P-256 SubjectPublicKeyInfo before its 65-byte point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A signing key.
pub struct Signer {
    key: EcdsaKeyPair,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").finish_non_exhaustive()
    }
}

impl Default for Signer {
    fn default() -> Signer {
        Signer::new()
    }
}

impl Signer {
    /// A new P-256 key.
    pub fn new() -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer { key }
    }

    /// The public key as `cosign.pub` holds it (PEM).
    pub fn public_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.key.public_key().as_ref());
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            lines.join("\n")
        )
    }

    /// Cosign's payload for the manifest `digest` of `reference` (`registry/repository`), and
    /// its signature in base64, as the signature layer's annotation holds it.
    pub fn sign(&self, reference: &str, digest: &str) -> (Vec<u8>, String) {
        let payload = serde_json::to_vec(&serde_json::json!({
            "critical": {
                "identity": {"docker-reference": reference},
                "image": {"docker-manifest-digest": digest},
                "type": "cosign container image signature",
            },
            "optional": null,
        }))
        .unwrap();
        let signature = self.key.sign(&SystemRandom::new(), &payload).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(signature.as_ref());
        (payload, b64)
    }
}
