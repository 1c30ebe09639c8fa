//! LZW as Go's `compress/lzw` does it with `LSB` bit order and 8-bit literals — the
//! only compression memberlist uses (`lzwAlgo`). Codes start 9 bits wide, grow to at
//! most 12; code 256 clears the table and 257 ends the stream. The decoder follows Go's
//! reader exactly, including its handling of a full table (stop adding entries until a
//! clear code), and is bounded: the output may not exceed `out_max` bytes and every code
//! is validated, so hostile input yields an error, never a panic.

use super::msgpack::WireError;

const LITERAL_BITS: u32 = 8;
const CLEAR: u16 = 1 << LITERAL_BITS;
const EOF: u16 = CLEAR + 1;
const WIDTH_MAX: u32 = 12;
const CODES_MAX: usize = 1 << WIDTH_MAX;
/// Marks "no previous code" (Go `decoderInvalidCode`).
const INVALID: u16 = 0xffff;

/// Decompresses a complete LZW stream (it must end with the EOF code, as Go requires).
pub fn decompress(input: &[u8], out_max: usize) -> Result<Vec<u8>, WireError> {
    let mut suffix = vec![0u8; CODES_MAX];
    let mut prefix = vec![0u16; CODES_MAX];
    let mut out: Vec<u8> = Vec::with_capacity((input.len() * 3).min(out_max));
    // Scratch for expanding one code, written back to front.
    let mut scratch = [0u8; CODES_MAX];

    let mut bits: u32 = 0;
    let mut n_bits: u32 = 0;
    let mut width: u32 = LITERAL_BITS + 1;
    let mut hi: u16 = EOF;
    let mut overflow: u16 = 1 << width;
    let mut last: u16 = INVALID;
    let mut pos = 0usize;

    loop {
        while n_bits < width {
            let Some(&b) = input.get(pos) else {
                return Err(WireError::Invalid("lzw: unexpected end of compressed data"));
            };
            pos += 1;
            bits |= (b as u32) << n_bits;
            n_bits += 8;
        }
        let code = (bits & ((1 << width) - 1)) as u16;
        bits >>= width;
        n_bits -= width;

        if code < CLEAR {
            if out.len() >= out_max {
                return Err(WireError::TooLarge {
                    what: "decompressed payload",
                    limit: out_max,
                });
            }
            out.push(code as u8);
            if last != INVALID {
                suffix[hi as usize] = code as u8;
                prefix[hi as usize] = last;
            }
        } else if code == CLEAR {
            width = LITERAL_BITS + 1;
            hi = EOF;
            overflow = 1 << width;
            last = INVALID;
            continue;
        } else if code == EOF {
            return Ok(out);
        } else if code <= hi {
            let mut i = scratch.len() - 1;
            let mut c = code;
            if code == hi && last != INVALID {
                // The code being defined right now: it expands to the last expansion
                // followed by that expansion's first byte.
                c = last;
                let mut guard = 0;
                while c >= CLEAR {
                    c = prefix[c as usize];
                    guard += 1;
                    if guard > CODES_MAX {
                        return Err(WireError::Invalid("lzw: corrupt prefix chain"));
                    }
                }
                scratch[i] = c as u8;
                i -= 1;
                c = last;
            } else if code == hi {
                return Err(WireError::Invalid("lzw: invalid code"));
            }
            while c >= CLEAR {
                if i == 0 || c == EOF {
                    return Err(WireError::Invalid("lzw: corrupt prefix chain"));
                }
                scratch[i] = suffix[c as usize];
                i -= 1;
                c = prefix[c as usize];
            }
            scratch[i] = c as u8;
            let piece = &scratch[i..];
            if out.len() + piece.len() > out_max {
                return Err(WireError::TooLarge {
                    what: "decompressed payload",
                    limit: out_max,
                });
            }
            out.extend_from_slice(piece);
            if last != INVALID {
                suffix[hi as usize] = c as u8;
                prefix[hi as usize] = last;
            }
        } else {
            return Err(WireError::Invalid("lzw: invalid code"));
        }
        last = code;
        hi += 1;
        if hi >= overflow {
            if width == WIDTH_MAX {
                // Table full: Go stops defining codes until the encoder sends CLEAR.
                last = INVALID;
                hi -= 1;
            } else {
                width += 1;
                overflow = 1 << width;
            }
        }
    }
}

/// Compresses like Go's `lzw.NewWriter(w, lzw.LSB, 8)` followed by `Close`, producing
/// the same code sequence (and so the same bytes) as memberlist's `compressPayload`.
pub fn compress(input: &[u8]) -> Vec<u8> {
    const TABLE_SIZE: usize = 4 * CODES_MAX;
    const TABLE_MASK: u32 = TABLE_SIZE as u32 - 1;
    const CODE_MAX: u32 = CODES_MAX as u32 - 1;
    let mut out = Vec::with_capacity(input.len() / 2 + 8);
    // Entries are key<<12 | code, key = prefix code<<8 | literal; 0 is empty.
    let mut table = vec![0u32; TABLE_SIZE];
    let mut bits: u32 = 0;
    let mut n_bits: u32 = 0;
    let mut width: u32 = LITERAL_BITS + 1;
    let mut hi: u32 = EOF as u32;
    let mut overflow: u32 = 1 << width;

    let emit = |code: u32, width: u32, bits: &mut u32, n_bits: &mut u32, out: &mut Vec<u8>| {
        *bits |= code << *n_bits;
        *n_bits += width;
        while *n_bits >= 8 {
            out.push(*bits as u8);
            *bits >>= 8;
            *n_bits -= 8;
        }
    };

    // Go's incHi: advance the next implied code, widening, or clearing when out of codes.
    // Returns true when the table was reset.
    fn inc_hi(
        hi: &mut u32,
        width: &mut u32,
        overflow: &mut u32,
        table: &mut [u32],
        mut emit_clear: impl FnMut(u32),
    ) -> bool {
        *hi += 1;
        if *hi == *overflow {
            *width += 1;
            *overflow <<= 1;
        }
        if *hi == CODE_MAX {
            emit_clear(*width);
            *width = LITERAL_BITS + 1;
            *hi = EOF as u32;
            *overflow = 1 << *width;
            table.iter_mut().for_each(|e| *e = 0);
            return true;
        }
        false
    }

    if let Some((&first, rest)) = input.split_first() {
        let mut code = first as u32;
        'next: for &x in rest {
            let literal = x as u32;
            let key = code << 8 | literal;
            let mut hash = (key >> 12 ^ key) & TABLE_MASK;
            let mut h = hash;
            while table[h as usize] != 0 {
                let t = table[h as usize];
                if key == t >> 12 {
                    code = t & CODE_MAX;
                    continue 'next;
                }
                h = (h + 1) & TABLE_MASK;
            }
            emit(code, width, &mut bits, &mut n_bits, &mut out);
            code = literal;
            let reset = inc_hi(&mut hi, &mut width, &mut overflow, &mut table, |w| {
                emit(CLEAR as u32, w, &mut bits, &mut n_bits, &mut out)
            });
            if reset {
                continue;
            }
            loop {
                if table[hash as usize] == 0 {
                    table[hash as usize] = (key << 12) | hi;
                    break;
                }
                hash = (hash + 1) & TABLE_MASK;
            }
        }
        emit(code, width, &mut bits, &mut n_bits, &mut out);
        inc_hi(&mut hi, &mut width, &mut overflow, &mut table, |w| {
            emit(CLEAR as u32, w, &mut bits, &mut n_bits, &mut out)
        });
    }
    emit(EOF as u32, width, &mut bits, &mut n_bits, &mut out);
    if n_bits > 0 {
        out.push(bits as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_small_and_large_inputs() {
        let mut samples: Vec<Vec<u8>> =
            vec![vec![], b"a".to_vec(), b"TOBEORNOTTOBEORTOBEORNOT".to_vec()];
        // Long and repetitive enough to fill the 4096-entry table and force clears.
        let mut big = Vec::new();
        let mut x: u32 = 12345;
        for _ in 0..200_000 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            big.push(b"abcdefgh"[(x >> 16) as usize % 8]);
        }
        samples.push(big);
        samples.push((0..=255u8).cycle().take(70_000).collect());
        for s in samples {
            let c = compress(&s);
            assert_eq!(decompress(&c, usize::MAX).unwrap(), s);
        }
    }

    #[test]
    fn matches_go_compress_lzw_bytes() {
        // Go: lzw.NewWriter(&b, lzw.LSB, 8); Write("TOBEORNOTTOBEORTOBEORNOT"); Close().
        // Code stream, 9 bits each: T O B E O R N O T 258 260 262 267 261 263 265 EOF,
        // packed LSB first; checked by hand against the writer's algorithm.
        let c = compress(b"TOBEORNOTTOBEORTOBEORNOT");
        let mut codes = Vec::new();
        let mut bits = 0u64;
        let mut n = 0;
        for &b in &c {
            bits |= (b as u64) << n;
            n += 8;
            while n >= 9 {
                codes.push((bits & 0x1ff) as u16);
                bits >>= 9;
                n -= 9;
            }
        }
        let want: Vec<u16> = b"TOBEORNOT"
            .iter()
            .map(|&b| b as u16)
            .chain([258, 260, 262, 267, 261, 263, 265, 257])
            .collect();
        assert_eq!(&codes[..want.len()], &want[..]);
    }

    #[test]
    fn hostile_input_is_an_error() {
        assert!(decompress(&[], 100).is_err());
        assert!(decompress(&[0xff, 0xff, 0xff], 100).is_err());
        // A bomb: one literal then a long run of valid back references, capped by out_max.
        let bomb = compress(&vec![b'z'; 100_000]);
        assert!(matches!(
            decompress(&bomb, 1000),
            Err(WireError::TooLarge { .. })
        ));
    }
}
