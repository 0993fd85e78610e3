//! The agent's credentials: a CA, a serving certificate signed by it, a bearer token, and a
//! kubeconfig that holds all kubectl needs. Made on first start under the state dir, reused after.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};

use crate::Error;

/// The files under `<state>/agent/`.
pub(crate) struct Credentials {
    pub(crate) token: String,
    pub(crate) tls: Arc<rustls::ServerConfig>,
    pub(crate) kubeconfig: PathBuf,
    /// The CA's certificate (PEM): what `kube-root-ca.crt` ConfigMaps hold.
    pub(crate) ca_pem: String,
}

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const CERT: &str = "serving.crt";
const TOKEN: &str = "token";
const KUBECONFIG: &str = "kubeconfig";

impl Credentials {
    /// Loads the credentials under `dir`, making what is missing. The kubeconfig is written
    /// anew for `listen` (the address may change between starts).
    pub(crate) fn load_or_make(dir: &Path, listen: SocketAddr, node: &str) -> Result<Self, Error> {
        create_private_dir(dir)?;
        let ca_pem = read_or(dir, CA_CERT, CA_KEY, || make_ca(node))?;
        let ca_key = KeyPair::from_pem(&ca_pem.1).map_err(|e| tls_error(dir, CA_KEY, e))?;
        // Made at every start from the CA the kubeconfig trusts, for the names and addresses the
        // agent has now (pods reach it as the `kubernetes` Service too); never written.
        let (cert_pem, key_pem) =
            make_serving(&ca_key, listen, node).map_err(|e| tls_error(dir, CERT, e))?;
        let token = match std::fs::read_to_string(dir.join(TOKEN)) {
            Ok(t) if t.trim().len() >= 32 => t.trim().to_owned(),
            _ => {
                let token = format!(
                    "{}{}",
                    uuid::Uuid::new_v4().simple(),
                    uuid::Uuid::new_v4().simple()
                );
                write_private(&dir.join(TOKEN), token.as_bytes())?;
                token
            }
        };
        let tls = server_config(&cert_pem, &key_pem).map_err(|e| tls_error(dir, CERT, e))?;
        let kubeconfig = dir.join(KUBECONFIG);
        // Written only when it changes (a new address or token): an agent restarted on a full
        // disk starts with the kubeconfig it has.
        let yaml = kubeconfig_yaml(&ca_pem.0, listen, node, &token);
        if std::fs::read(&kubeconfig).ok().as_deref() != Some(yaml.as_bytes()) {
            write_private(&kubeconfig, yaml.as_bytes())?;
        }
        Ok(Credentials {
            token,
            tls,
            kubeconfig,
            ca_pem: ca_pem.0,
        })
    }
}

fn tls_error(dir: &Path, file: &str, e: impl std::fmt::Display) -> Error {
    Error::Credentials {
        path: dir.join(file),
        message: e.to_string(),
    }
}

/// Reads a certificate and its key, or makes and writes both.
fn read_or(
    dir: &Path,
    cert: &str,
    key: &str,
    make: impl FnOnce() -> Result<(String, String), rcgen::Error>,
) -> Result<(String, String), Error> {
    if let (Ok(c), Ok(k)) = (
        std::fs::read_to_string(dir.join(cert)),
        std::fs::read_to_string(dir.join(key)),
    ) {
        return Ok((c, k));
    }
    let (c, k) = make().map_err(|e| tls_error(dir, cert, e))?;
    write_private(&dir.join(key), k.as_bytes())?;
    write_private(&dir.join(cert), c.as_bytes())?;
    Ok((c, k))
}

/// The CA's certificate parameters (also what signs: the issuer's name is the CA's subject).
fn ca_params(node: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("wasmpod-ca@{node}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_after = rcgen::date_time_ymd(2125, 1, 1);
    params
}

fn make_ca(node: &str) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let cert = ca_params(node).self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn make_serving(
    ca_key: &KeyPair,
    listen: SocketAddr,
    node: &str,
) -> Result<(String, String), rcgen::Error> {
    let issuer = rcgen::Issuer::new(ca_params(node), ca_key);
    let key = KeyPair::generate()?;
    // The names in-cluster clients use for the API, as an API server's certificate has them.
    let mut names = vec![
        "localhost".to_owned(),
        node.to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ];
    names.dedup();
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("wasmpod@{node}"));
    for ip in [
        listen.ip(),
        std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::Ipv6Addr::LOCALHOST.into(),
        wasmpod::KUBERNETES_SERVICE.ip(),
    ] {
        if !ip.is_unspecified() {
            params.subject_alt_names.push(SanType::IpAddress(ip));
        }
    }
    params.not_after = rcgen::date_time_ymd(2125, 1, 1);
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn server_config(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn kubeconfig_yaml(ca_pem: &str, listen: SocketAddr, node: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let host = match listen.ip() {
        ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let server = format!("https://{host}:{}", listen.port());
    let name = format!("wasmpod-{node}");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\n"
    )
}

fn create_private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })
}

/// Writes a file only its owner can read, atomically (a crash leaves the old file or the new).
pub(crate) fn write_private(path: &Path, content: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(content).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
