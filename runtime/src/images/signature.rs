//! Cosign signatures, checked offline with a public key. `cosign sign --key` stores an image's
//! signatures in the image's repository under the tag `sha256-<hex>.sig`: a manifest whose
//! layers are "simple signing" payloads (`application/vnd.dev.cosign.simplesigning.v1+json`,
//! a JSON document naming the signed manifest's digest), each with its signature in the
//! `dev.cosignproject.cosign/signature` annotation. An image is signed when one of those
//! payloads names the digest its reference resolved to and carries a signature that the key
//! verifies. The transparency log (Rekor) is not consulted: a device checks offline, with the
//! key alone, as `cosign verify --key cosign.pub --insecure-ignore-tlog` does.
//!
//! The keys are what cosign signs with: ECDSA P-256 (`cosign generate-key-pair`) and P-384,
//! Ed25519 and RSA (PKCS#1 v1.5, SHA-256), as PEM `PUBLIC KEY` blocks. The primitives are
//! ring's (already in the node for TLS), the key's DER structure is read with RustCrypto's
//! `spki`: the Sigstore project's Rust library would bring its own TLS, OIDC and X.509 stacks
//! for what is here one signature check.

use ring::signature::{self, VerificationAlgorithm};
use rustls_pki_types::SubjectPublicKeyInfoDer;
use rustls_pki_types::pem::PemObject;
use sha2::{Digest as _, Sha256};
use spki::ObjectIdentifier;

/// The media type of a cosign signature layer, and the annotation holding its signature.
#[cfg(feature = "registry")]
pub(crate) const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
#[cfg(feature = "registry")]
pub(crate) const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The most bytes of one signature payload, and the most signature layers looked at.
#[cfg(feature = "registry")]
pub(crate) const MAX_PAYLOAD: u64 = 64 << 10;
#[cfg(feature = "registry")]
pub(crate) const MAX_SIGNATURES: usize = 64;

const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");

/// A public key that images and artifacts must be signed with, as `cosign generate-key-pair`
/// writes it (`cosign.pub`).
#[derive(Clone)]
pub struct VerifyKey {
    algorithm: &'static dyn VerificationAlgorithm,
    /// The SPKI's `subjectPublicKey` bits, as ring takes them.
    key: Vec<u8>,
    id: String,
}

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("VerifyKey").field(&self.id).finish()
    }
}

impl PartialEq for VerifyKey {
    fn eq(&self, other: &VerifyKey) -> bool {
        self.id == other.id
    }
}

/// Why a public key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidKey(String);

impl VerifyKey {
    /// Reads a PEM `PUBLIC KEY` (SubjectPublicKeyInfo) block: ECDSA P-256 or P-384, Ed25519
    /// or RSA of 2048 bits or more.
    pub fn from_pem(pem: &[u8]) -> Result<VerifyKey, InvalidKey> {
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem)
            .map_err(|e| InvalidKey(format!("not a PEM public key (a PUBLIC KEY block): {e}")))?;
        let info = spki::SubjectPublicKeyInfoRef::try_from(der.as_ref()).map_err(|e| {
            InvalidKey(format!("the public key is not a SubjectPublicKeyInfo: {e}"))
        })?;
        let curve = || {
            info.algorithm
                .parameters
                .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
        };
        let algorithm: &'static dyn VerificationAlgorithm = match info.algorithm.oid {
            EC_PUBLIC_KEY if curve() == Some(P256) => &signature::ECDSA_P256_SHA256_ASN1,
            EC_PUBLIC_KEY if curve() == Some(P384) => &signature::ECDSA_P384_SHA384_ASN1,
            EC_PUBLIC_KEY => {
                return Err(InvalidKey(format!(
                    "an ECDSA key on curve {}: only P-256 and P-384 are taken",
                    curve().map_or("(none named)".into(), |c| c.to_string())
                )));
            }
            ED25519 => &signature::ED25519,
            RSA => &signature::RSA_PKCS1_2048_8192_SHA256,
            other => {
                return Err(InvalidKey(format!(
                    "a key of algorithm {other}: only ECDSA (P-256, P-384), Ed25519 and RSA are \
                     taken"
                )));
            }
        };
        let key = info
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| InvalidKey("the public key's bits are not whole bytes".into()))?
            .to_vec();
        let hash = Sha256::digest(der.as_ref());
        Ok(VerifyKey {
            algorithm,
            key,
            id: format!("sha256:{:x}", hash)[..23].to_owned(),
        })
    }

    /// A short name of the key for messages: the start of the SHA-256 of its DER form.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether `signature` is this key's over `payload`.
    #[cfg_attr(
        not(feature = "registry"),
        allow(dead_code, reason = "only a pull checks signatures")
    )]
    pub(crate) fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        signature::UnparsedPublicKey::new(self.algorithm, &self.key)
            .verify(payload, signature)
            .is_ok()
    }
}

/// The tag cosign stores the signatures of the manifest `digest` under.
#[cfg(feature = "registry")]
pub(crate) fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// What one signature layer says, once read: `Ok` when it signs `digest` with `key`.
#[cfg(feature = "registry")]
pub(crate) fn check_layer(
    key: &VerifyKey,
    digest: &str,
    payload: &[u8],
    signature_b64: &str,
) -> Result<(), String> {
    use base64::Engine as _;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(signature_b64.trim())
        .map_err(|_| "a signature that is not base64".to_owned())?;
    if !key.verifies(payload, &signature) {
        return Err(format!("a signature not made with the key {}", key.id()));
    }
    #[derive(serde::Deserialize)]
    struct SimpleSigning {
        critical: Critical,
    }
    #[derive(serde::Deserialize)]
    struct Critical {
        image: Image,
        #[serde(rename = "type")]
        kind: String,
    }
    #[derive(serde::Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    let signed: SimpleSigning = serde_json::from_slice(payload)
        .map_err(|e| format!("a signed payload that is not cosign's: {e}"))?;
    if signed.critical.kind != "cosign container image signature" {
        return Err(format!(
            "a signed payload of type {:?}, not a cosign image signature",
            shown(&signed.critical.kind)
        ));
    }
    if signed.critical.image.digest != digest {
        return Err(format!(
            "a signature by the key {} for {}, not for {digest}",
            key.id(),
            shown(&signed.critical.image.digest)
        ));
    }
    Ok(())
}

/// The start of a string a signer wrote, for a message: at most 80 bytes of it.
#[cfg(feature = "registry")]
fn shown(text: &str) -> String {
    match text.get(..text.floor_char_boundary(80)) {
        Some(start) if start.len() < text.len() => format!("{start}…"),
        _ => text.to_owned(),
    }
}

#[cfg(all(test, feature = "registry"))]
mod tests {
    use super::*;

    /// A signature cosign made, from sigstore-rs's test data (`testdata/cosign/README.md`).
    #[test]
    fn a_signature_cosign_made_is_verified() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/cosign");
        let key = VerifyKey::from_pem(&std::fs::read(dir.join("cosign.pub")).unwrap()).unwrap();
        let payload = std::fs::read(dir.join("payload.json")).unwrap();
        let signature = std::fs::read_to_string(dir.join("signature.b64")).unwrap();
        let digest = "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";
        assert_eq!(check_layer(&key, digest, &payload, &signature), Ok(()));
        // Another digest, a changed payload, another key: refused, each with its reason.
        let other = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let why = check_layer(&key, other, &payload, &signature).unwrap_err();
        assert!(why.contains("not for sha256:0000"), "{why}");
        let mut tampered = payload.clone();
        tampered[10] ^= 1;
        let why = check_layer(&key, digest, &tampered, &signature).unwrap_err();
        assert!(why.contains("not made with the key"), "{why}");
        let another =
            VerifyKey::from_pem(&std::fs::read(dir.join("another.pub")).unwrap()).unwrap();
        assert_ne!(another.id(), key.id());
        let why = check_layer(&another, digest, &payload, &signature).unwrap_err();
        assert!(why.contains(another.id()), "{why}");
    }

    #[test]
    fn keys_that_cannot_verify_are_refused_with_the_reason() {
        let e = VerifyKey::from_pem(b"not pem").unwrap_err();
        assert!(e.0.contains("PUBLIC KEY"), "{e}");
        // A secp256k1 key (an ECDSA curve cosign does not sign with).
        let k1 = b"-----BEGIN PUBLIC KEY-----\n\
            MFYwEAYHKoZIzj0CAQYFK4EEAAoDQgAEkIUJgHSSsV7QlR5mb5y81CITdWeisOED\n\
            gJcEuJqONQ06cBO2oKmyHoY9YjbiG7B8eXurnjhYxPqGFODrpYJW5w==\n\
            -----END PUBLIC KEY-----\n";
        let e = VerifyKey::from_pem(k1).unwrap_err();
        assert!(e.0.contains("curve 1.3.132.0.10"), "{e}");
    }

    #[test]
    fn what_a_signer_wrote_is_shown_to_a_bound() {
        assert_eq!(shown("sha256:abc"), "sha256:abc");
        let long = "é".repeat(1000);
        let cut = shown(&long);
        assert!(
            cut.len() <= 80 + '…'.len_utf8() && cut.ends_with('…'),
            "{cut}"
        );
    }

    #[test]
    fn signature_tags_are_cosigns() {
        assert_eq!(signature_tag("sha256:abc"), "sha256-abc.sig");
    }
}
