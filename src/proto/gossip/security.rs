//! memberlist's keyring encryption framing (`security.go`): `[version][nonce 12][GCM
//! ciphertext + 16-byte tag]`, AES-GCM with a 16, 24 or 32-byte key.
//!
//! - Version 0 pads the plaintext with PKCS#7 to the AES block size before sealing
//!   (protocol version 1 peers); version 1 (everyone since) does not pad.
//! - The additional authenticated data is the packet label for UDP, and the 5-byte
//!   `[encryptMsg][len]` stream header followed by the label for TCP.
//! - Decryption tries every installed key, primary first.
//!
//! The nonce is an argument: the caller draws it from its (cryptographically seeded)
//! random source, which keeps this module free of hidden randomness.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes192;
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm, Nonce};

use super::msgpack::WireError;

type Aes192Gcm = AesGcm<Aes192, aes_gcm::aead::consts::U12>;

const VERSION_BYTES: usize = 1;
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;
const BLOCK_BYTES: usize = 16;
/// Newest encryption version understood.
pub const ENCRYPTION_VERSION_MAX: u8 = 1;

/// memberlist `ValidateKey`: AES-128, AES-192 or AES-256.
pub fn validate_key(key: &[u8]) -> Result<(), WireError> {
    match key.len() {
        16 | 24 | 32 => Ok(()),
        _ => Err(WireError::Invalid("key size must be 16, 24 or 32 bytes")),
    }
}

/// memberlist `encryptOverhead`.
pub fn encrypt_overhead(version: u8) -> usize {
    match version {
        0 => VERSION_BYTES + NONCE_BYTES + BLOCK_BYTES + TAG_BYTES,
        _ => VERSION_BYTES + NONCE_BYTES + TAG_BYTES,
    }
}

/// memberlist `encryptedLength`.
pub fn encrypted_length(version: u8, plain_len: usize) -> usize {
    if version >= 1 {
        return VERSION_BYTES + NONCE_BYTES + plain_len + TAG_BYTES;
    }
    let padding = BLOCK_BYTES - (plain_len % BLOCK_BYTES);
    VERSION_BYTES + NONCE_BYTES + plain_len + padding + TAG_BYTES
}

fn seal(key: &[u8], nonce: &[u8; 12], msg: &[u8], aad: &[u8]) -> Vec<u8> {
    let nonce = Nonce::from_slice(nonce);
    let payload = Payload { msg, aad };
    // Keys are validated when installed in the keyring; an invalid one here is a bug.
    let sealed = match key.len() {
        16 => Aes128Gcm::new_from_slice(key).map(|c| c.encrypt(nonce, payload)),
        24 => Aes192Gcm::new_from_slice(key).map(|c| c.encrypt(nonce, payload)),
        _ => Aes256Gcm::new_from_slice(key).map(|c| c.encrypt(nonce, payload)),
    };
    match sealed {
        Ok(Ok(ct)) => ct,
        _ => unreachable!("AES-GCM sealing with a validated key cannot fail"),
    }
}

fn open(key: &[u8], nonce: &[u8], ct: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
    let nonce = Nonce::from_slice(nonce);
    let payload = Payload { msg: ct, aad };
    let opened = match key.len() {
        16 => Aes128Gcm::new_from_slice(key).ok()?.decrypt(nonce, payload),
        24 => Aes192Gcm::new_from_slice(key).ok()?.decrypt(nonce, payload),
        32 => Aes256Gcm::new_from_slice(key).ok()?.decrypt(nonce, payload),
        _ => return None,
    };
    opened.ok()
}

/// memberlist `encryptPayload`: appends `[version][nonce][ciphertext+tag]` to `dst`.
pub fn encrypt_payload(
    version: u8,
    key: &[u8],
    msg: &[u8],
    aad: &[u8],
    nonce: [u8; 12],
    dst: &mut Vec<u8>,
) {
    debug_assert!(validate_key(key).is_ok());
    dst.reserve(encrypted_length(version, msg.len()));
    dst.push(version);
    dst.extend_from_slice(&nonce);
    if version == 0 {
        let mut padded = msg.to_vec();
        let more = BLOCK_BYTES - (msg.len() % BLOCK_BYTES);
        padded.extend(std::iter::repeat_n(more as u8, more));
        dst.extend_from_slice(&seal(key, &nonce, &padded, aad));
    } else {
        dst.extend_from_slice(&seal(key, &nonce, msg, aad));
    }
}

/// memberlist `decryptPayload`: tries each key in order.
pub fn decrypt_payload(keys: &[Vec<u8>], msg: &[u8], aad: &[u8]) -> Result<Vec<u8>, WireError> {
    let Some(&version) = msg.first() else {
        return Err(WireError::Invalid("cannot decrypt empty payload"));
    };
    if version > ENCRYPTION_VERSION_MAX {
        return Err(WireError::Invalid("unsupported encryption version"));
    }
    if msg.len() < encrypted_length(version, 0) {
        return Err(WireError::Invalid("payload is too small to decrypt"));
    }
    let nonce = &msg[VERSION_BYTES..VERSION_BYTES + NONCE_BYTES];
    let ct = &msg[VERSION_BYTES + NONCE_BYTES..];
    for key in keys {
        if let Some(mut plain) = open(key, nonce, ct, aad) {
            if version == 0 {
                let pad = *plain
                    .last()
                    .ok_or(WireError::Invalid("empty padded plaintext"))?
                    as usize;
                if pad == 0 || pad > BLOCK_BYTES || pad > plain.len() {
                    return Err(WireError::Invalid("invalid PKCS#7 padding"));
                }
                plain.truncate(plain.len() - pad);
            }
            return Ok(plain);
        }
    }
    Err(WireError::Invalid(
        "no installed keys could decrypt the message",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_round_trip_with_every_key_size() {
        for len in [16, 24, 32] {
            let key = vec![7u8; len];
            for version in [0u8, 1] {
                let mut out = Vec::new();
                encrypt_payload(version, &key, b"hello gossip", b"label", [3; 12], &mut out);
                assert_eq!(out.len(), encrypted_length(version, 12));
                assert_eq!(out[0], version);
                assert_eq!(&out[1..13], &[3; 12]);
                let plain = decrypt_payload(&[vec![1u8; 16], key.clone()], &out, b"label").unwrap();
                assert_eq!(plain, b"hello gossip");
                assert!(decrypt_payload(std::slice::from_ref(&key), &out, b"other").is_err());
            }
        }
    }

    #[test]
    fn version_zero_pads_a_full_block_when_aligned() {
        assert_eq!(encrypted_length(0, 16), 1 + 12 + 16 + 16 + 16);
        assert_eq!(encrypted_length(1, 16), 1 + 12 + 16 + 16);
        assert_eq!(encrypt_overhead(0), 45);
        assert_eq!(encrypt_overhead(1), 29);
    }

    #[test]
    fn garbage_is_rejected_cleanly() {
        let keys = [vec![0u8; 16]];
        assert!(decrypt_payload(&keys, &[], &[]).is_err());
        assert!(decrypt_payload(&keys, &[9; 40], &[]).is_err());
        assert!(decrypt_payload(&keys, &[1; 20], &[]).is_err());
        assert!(decrypt_payload(&keys, &[1; 60], &[]).is_err());
    }
}
