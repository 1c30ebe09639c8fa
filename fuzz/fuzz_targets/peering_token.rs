//! Feeds arbitrary bytes to the peering token decoder (`POST /v1/peering/establish`'s
//! `PeeringToken`, another cluster's text). Decoding and validating must never panic; a
//! token that decodes must encode and decode back to the same token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use praetor::consul::peering::{decode_token, encode_token, validate_token};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(token) = decode_token(text) else { return };
    let _ = validate_token(&token);
    let again = decode_token(&encode_token(&token)).expect("an encoded token decodes");
    assert_eq!(again, token, "the round trip changed the token");
});
