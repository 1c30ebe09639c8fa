//! Reading certificates, keys and CA bundles from disk, with bounds on every read.
//!
//! One place for the file rules the agent and the CLI share: a PEM file is read whole but never
//! past [`PEM_FILE_BYTES_MAX`]; a CA directory is read one level deep, in lexical order, and
//! never past [`CA_PATH_FILES_MAX`] files; an unreadable or empty input is an error that names
//! the file. Nothing here keeps state: every call reads the files again, which is what a
//! certificate reload needs.

pub use crate::config::tls::CaSource;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest PEM file (CA bundle, certificate chain, key) read.
pub const PEM_FILE_BYTES_MAX: u64 = 16 << 20;
/// Most files read from a CA directory (`ca_path`, `-ca-path`).
pub const CA_PATH_FILES_MAX: usize = 4096;

/// The one crypto provider praetor uses (ring), with every suite it offers.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads a whole file, refusing one larger than `bytes_max`. `what` starts the error text.
pub fn read_bounded(path: &Path, bytes_max: u64, what: &str) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    let mut data = Vec::new();
    file.take(bytes_max + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if data.len() as u64 > bytes_max {
        return Err(format!(
            "{what} {}: larger than {bytes_max} bytes",
            path.display()
        ));
    }
    debug_assert!(data.len() as u64 <= bytes_max);
    Ok(data)
}

/// Every certificate in a PEM file, in file order; a file without one is an error.
pub fn pem_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let data = read_bounded(path, PEM_FILE_BYTES_MAX, what)?;
    let certificates = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "{what} {}: Couldn't parse PEM in: {}",
            path.display(),
            path.display()
        ));
    }
    Ok(certificates)
}

/// Every certificate in PEM text (not from a file: auto-encrypt's answers, the replicated
/// agent CA); text without one is an error.
pub fn pem_slice_certificates(
    pem: &[u8],
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certificates.is_empty() {
        return Err(format!("{what}: no PEM certificate"));
    }
    Ok(certificates)
}

/// The first private key in a PEM file (PKCS#8, SEC1 or PKCS#1).
pub fn pem_private_key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let data = read_bounded(path, PEM_FILE_BYTES_MAX, what)?;
    PrivateKeyDer::from_pem_slice(&data).map_err(|e| format!("{what} {}: {e}", path.display()))
}

/// The CA certificates of `source`, or `None` when it names no file nor directory. A directory
/// without any certificate is an error, as Consul's `LoadCAs` makes it.
pub fn load_ca_certificates(
    source: &CaSource,
) -> Result<Option<Vec<CertificateDer<'static>>>, String> {
    if let Some(file) = &source.file {
        return pem_certificates(file, "Error loading CA File:").map(Some);
    }
    let Some(dir) = &source.path else {
        return Ok(None);
    };
    let shown = dir.display();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("Error loading CA Path: {shown}: {e}"))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .take(CA_PATH_FILES_MAX + 1)
        .collect();
    if paths.len() > CA_PATH_FILES_MAX {
        return Err(format!(
            "Error loading CA Path: {shown}: more than {CA_PATH_FILES_MAX} files"
        ));
    }
    paths.sort();
    let mut certificates = Vec::new();
    for path in paths {
        certificates.extend(pem_certificates(&path, "Error loading file from CAPath:")?);
    }
    if certificates.is_empty() {
        return Err(format!(
            "Error loading CA Path: {shown}: no CA certificates found"
        ));
    }
    Ok(Some(certificates))
}

/// A root store holding `certificates`; a certificate that is not a usable trust anchor is an
/// error naming its position, rather than silently left out.
pub fn root_store(
    certificates: &[CertificateDer<'static>],
) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for (index, certificate) in certificates.iter().enumerate() {
        roots
            .add(certificate.clone())
            .map_err(|e| format!("CA certificate #{}: {e}", index + 1))?;
    }
    debug_assert_eq!(roots.len(), certificates.len());
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reads_and_empty_inputs_are_errors() {
        let dir = std::env::temp_dir().join(format!("praetor-tls-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; 11]).unwrap();
        assert_eq!(read_bounded(&big, 11, "f").unwrap().len(), 11);
        assert!(read_bounded(&big, 10, "f")
            .unwrap_err()
            .ends_with("larger than 10 bytes"));
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        assert!(pem_certificates(&not_pem, "CA")
            .unwrap_err()
            .contains("Couldn't parse PEM"));
        let empty_dir = dir.join("empty");
        std::fs::create_dir_all(&empty_dir).unwrap();
        let source = CaSource {
            file: None,
            path: Some(empty_dir),
        };
        assert!(load_ca_certificates(&source)
            .unwrap_err()
            .ends_with("no CA certificates found"));
        assert_eq!(load_ca_certificates(&CaSource::default()), Ok(None));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
