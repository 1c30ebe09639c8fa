//! The `/v1/snapshot` archive: a gzipped tar holding `meta.json`, `state.bin` and
//! `SHA256SUMS`, laid out as Consul's snapshot archives are. Restoring verifies the SHA-256 of
//! both files against `SHA256SUMS` before anything is applied.
//!
//! Untrusted input: decompression is bounded by the caller's size limit, tar headers are
//! checked (checksum, octal sizes, names), and anything unexpected is a clear error.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};

const BLOCK_BYTES: usize = 512;
/// Files an archive may contain; anything more is not ours.
const ARCHIVE_FILES_MAX: usize = 16;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn tar_header(name: &str, size: usize, mtime_secs: u64) -> [u8; BLOCK_BYTES] {
    let mut header = [0u8; BLOCK_BYTES];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..108].copy_from_slice(b"0000644\0");
    header[108..116].copy_from_slice(b"0000000\0");
    header[116..124].copy_from_slice(b"0000000\0");
    header[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    header[136..148].copy_from_slice(format!("{mtime_secs:011o}\0").as_bytes());
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let checksum: u32 = header.iter().map(|b| *b as u32).sum();
    header[148..156].copy_from_slice(format!("{checksum:06o}\0 ").as_bytes());
    header
}

/// The length and SHA-256 of a state file, measured before the archive is written: a tar
/// header states its file's size before the bytes, and `SHA256SUMS` is part of the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateDigest {
    pub len: u64,
    pub sha256: [u8; 32],
}

/// A writer that keeps nothing of what passes through it but its length and SHA-256, so a
/// large state can be measured without being held in memory.
pub struct DigestWriter<W> {
    inner: W,
    len: u64,
    hasher: Sha256,
}

impl<W: Write> DigestWriter<W> {
    pub fn new(inner: W) -> Self {
        DigestWriter {
            inner,
            len: 0,
            hasher: Sha256::new(),
        }
    }

    pub fn finish(self) -> (W, StateDigest) {
        let digest = StateDigest {
            len: self.len,
            sha256: self.hasher.finalize().into(),
        };
        (self.inner, digest)
    }
}

impl<W: Write> Write for DigestWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Measures the state `write_state` writes, keeping none of it.
pub fn digest_state(
    write_state: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<StateDigest> {
    let mut sink = DigestWriter::new(std::io::sink());
    write_state(&mut sink)?;
    Ok(sink.finish().1)
}

fn pad_to_block(out: &mut dyn Write, len: u64) -> std::io::Result<()> {
    let padding = (BLOCK_BYTES as u64 - len % BLOCK_BYTES as u64) % BLOCK_BYTES as u64;
    out.write_all(&[0u8; BLOCK_BYTES][..padding as usize])
}

/// Writes the archive into `out` (compressed as it goes), the state produced a second time by
/// `write_state`, which must write exactly the bytes [`digest_state`] measured as `digest`:
/// a state that changed in between is an error, never an archive whose sums do not match.
/// Memory: the compressor's window and `out`, never a copy of the state.
pub fn write_archive_to<W: Write>(
    meta_json: &[u8],
    digest: &StateDigest,
    mtime_secs: u64,
    write_state: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    out: W,
) -> std::io::Result<W> {
    let sums = format!(
        "{}  meta.json\n{}  state.bin\n",
        hex(&Sha256::digest(meta_json)),
        hex(&digest.sha256)
    );
    let mut tar = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    tar.write_all(&tar_header("meta.json", meta_json.len(), mtime_secs))?;
    tar.write_all(meta_json)?;
    pad_to_block(&mut tar, meta_json.len() as u64)?;
    let state_len = usize::try_from(digest.len).map_err(std::io::Error::other)?;
    tar.write_all(&tar_header("state.bin", state_len, mtime_secs))?;
    let mut state = DigestWriter::new(tar);
    write_state(&mut state)?;
    let (mut tar, written) = state.finish();
    if written != *digest {
        return Err(std::io::Error::other(
            "the state changed between measuring and writing it",
        ));
    }
    pad_to_block(&mut tar, digest.len)?;
    tar.write_all(&tar_header("SHA256SUMS", sums.len(), mtime_secs))?;
    tar.write_all(sums.as_bytes())?;
    pad_to_block(&mut tar, sums.len() as u64)?;
    tar.write_all(&[0u8; 2 * BLOCK_BYTES])?;
    tar.finish()
}

/// Longest entry name a plain ustar header holds (its name field, less the terminator).
pub const TAR_NAME_BYTES_MAX: usize = 99;

/// A gzipped tar of files already in memory, in the order given (the `praetor debug`
/// archive uses the same writer as snapshots). Names longer than [`TAR_NAME_BYTES_MAX`] are
/// an error.
pub fn write_tar_gz(entries: &[(String, Vec<u8>)], mtime_secs: u64) -> std::io::Result<Vec<u8>> {
    let mut tar = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for (name, data) in entries {
        if name.len() > TAR_NAME_BYTES_MAX {
            return Err(std::io::Error::other(format!(
                "archive entry name longer than {TAR_NAME_BYTES_MAX} bytes: {name}"
            )));
        }
        tar.write_all(&tar_header(name, data.len(), mtime_secs))?;
        tar.write_all(data)?;
        pad_to_block(&mut tar, data.len() as u64)?;
    }
    tar.write_all(&[0u8; 2 * BLOCK_BYTES])?;
    tar.finish()
}

/// Builds the archive for a snapshot's metadata (JSON) and a state already in memory.
pub fn write_archive(meta_json: &[u8], state: &[u8], mtime_secs: u64) -> Vec<u8> {
    let mut write_state = |out: &mut dyn Write| out.write_all(state);
    let digest = digest_state(&mut write_state).expect("hashing cannot fail");
    write_archive_to(
        meta_json,
        &digest,
        mtime_secs,
        &mut write_state,
        Vec::with_capacity(state.len() / 2 + 1024),
    )
    .expect("writing to a Vec cannot fail")
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// The verified contents of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    pub meta_json: Vec<u8>,
    pub state: Vec<u8>,
}

/// Unpacks and verifies an archive whose uncompressed size is at most `bytes_max`.
pub fn read_archive(compressed: &[u8], bytes_max: u64) -> Result<Archive, String> {
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(compressed)
        .take(bytes_max + 1)
        .read_to_end(&mut tar)
        .map_err(|e| format!("snapshot archive is not valid gzip: {e}"))?;
    if tar.len() as u64 > bytes_max {
        return Err(format!("snapshot archive expands beyond {bytes_max} bytes"));
    }
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut offset = 0;
    while offset + BLOCK_BYTES <= tar.len() {
        let header = &tar[offset..offset + BLOCK_BYTES];
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let stored_checksum =
            parse_octal(&header[148..156]).ok_or("snapshot archive: bad tar checksum field")?;
        let checksum: u64 = header
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if (148..156).contains(&i) {
                    b' ' as u64
                } else {
                    *b as u64
                }
            })
            .sum();
        if checksum != stored_checksum {
            return Err("snapshot archive: tar header checksum mismatch".to_string());
        }
        let name_end = header[..100].iter().position(|b| *b == 0).unwrap_or(100);
        let name = std::str::from_utf8(&header[..name_end])
            .map_err(|_| "snapshot archive: file name is not UTF-8")?
            .to_string();
        let size =
            parse_octal(&header[124..136]).ok_or("snapshot archive: bad tar size field")? as usize;
        let data_start = offset + BLOCK_BYTES;
        let data_end = data_start
            .checked_add(size)
            .filter(|end| *end <= tar.len())
            .ok_or("snapshot archive: truncated file")?;
        if files.len() == ARCHIVE_FILES_MAX {
            return Err("snapshot archive: too many files".to_string());
        }
        files.push((name, tar[data_start..data_end].to_vec()));
        offset = data_start + size.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
    }
    let take = |name: &str| -> Result<Vec<u8>, String> {
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
            .ok_or_else(|| format!("snapshot archive: missing {name}"))
    };
    let meta_json = take("meta.json")?;
    let state = take("state.bin")?;
    let sums = String::from_utf8(take("SHA256SUMS")?)
        .map_err(|_| "snapshot archive: SHA256SUMS is not text")?;
    for (name, data) in [("meta.json", &meta_json), ("state.bin", &state)] {
        let expected = sums
            .lines()
            .find_map(|line| {
                line.split_once("  ")
                    .filter(|(_, n)| *n == name)
                    .map(|(sum, _)| sum.to_string())
            })
            .ok_or_else(|| format!("snapshot archive: SHA256SUMS has no entry for {name}"))?;
        if expected != hex(&Sha256::digest(data)) {
            return Err(format!(
                "snapshot archive: SHA-256 of {name} does not match SHA256SUMS"
            ));
        }
    }
    Ok(Archive { meta_json, state })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_state_is_written_once_and_checked() {
        let state: Vec<u8> = (0..70_000u32).flat_map(|i| i.to_le_bytes()).collect();
        // The state arrives in small pieces, as a serializer writes it.
        let mut write_state =
            |out: &mut dyn Write| state.chunks(100).try_for_each(|piece| out.write_all(piece));
        let digest = digest_state(&mut write_state).unwrap();
        assert_eq!(digest.len, state.len() as u64);
        let archive =
            write_archive_to(b"{}", &digest, 1_700_000_000, &mut write_state, Vec::new()).unwrap();
        let read = read_archive(&archive, 1 << 20).unwrap();
        assert_eq!(read.state, state);
        assert_eq!(read.meta_json, b"{}");
        // A state that is not the one measured is refused rather than archived.
        let mut other = |out: &mut dyn Write| out.write_all(&state[1..]);
        let refused = write_archive_to(b"{}", &digest, 0, &mut other, Vec::new());
        assert!(refused.is_err());
        let mut same_length = |out: &mut dyn Write| out.write_all(&vec![0; state.len()]);
        assert!(write_archive_to(b"{}", &digest, 0, &mut same_length, Vec::new()).is_err());
    }

    #[test]
    fn round_trip_and_tamper_detection() {
        let state: Vec<u8> = (0..5000u32).flat_map(|i| i.to_le_bytes()).collect();
        let archive = write_archive(br#"{"Index":7}"#, &state, 1_700_000_000);
        let read = read_archive(&archive, 1 << 20).unwrap();
        assert_eq!(read.meta_json, br#"{"Index":7}"#);
        assert_eq!(read.state, state);

        // Flip one byte of state.bin inside the tar and re-compress: the digest catches it.
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&archive[..])
            .read_to_end(&mut tar)
            .unwrap();
        tar[BLOCK_BYTES * 2 + 10 + 512] ^= 1;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&tar).unwrap();
        let tampered = encoder.finish().unwrap();
        let error = read_archive(&tampered, 1 << 20).unwrap_err();
        assert!(error.contains("SHA-256 of state.bin"), "{error}");

        assert!(read_archive(b"not gzip", 1 << 20)
            .unwrap_err()
            .contains("gzip"));
        assert!(read_archive(&archive, 100)
            .unwrap_err()
            .contains("expands beyond"));
    }
}
