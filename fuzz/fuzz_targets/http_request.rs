//! Feeds arbitrary bytes to the HTTP request parser as a connection would: head, then body
//! framing (Content-Length or chunked), then query string and path decoding. The parser must
//! never panic, never report ranges outside the buffer, and never decode more body than the
//! limit allows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use praetor::proto::http::{self, BodyFraming, ChunkedDecoder, HttpLimits, QueryParams};

const BODY_BYTES_MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let limits = HttpLimits { head_bytes_max: 8192, headers_count_max: 32, body_bytes_max: BODY_BYTES_MAX };
    let Ok(Some(head)) = http::parse_head(data, &limits) else { return };
    assert!(head.head_len <= data.len());
    for range in [&head.path, &head.query, &head.method_range] {
        assert!(range.start <= range.end && range.end as usize <= head.head_len);
    }
    for h in &head.headers {
        assert!(h.name.end as usize <= head.head_len && h.value.end as usize <= head.head_len);
    }
    let rest = &data[head.head_len..];
    if head.framing == BodyFraming::Chunked {
        let mut decoder = ChunkedDecoder::default();
        let mut body = Vec::new();
        // Feed in two pieces to exercise the incremental path.
        let split = rest.len() / 2;
        if let Ok(used) = decoder.decode(&rest[..split], &mut body, BODY_BYTES_MAX) {
            assert!(used <= split);
            let mut remaining = rest[used..].to_vec();
            if decoder.decode(&remaining, &mut body, BODY_BYTES_MAX).is_ok() {
                remaining.clear();
            }
        }
        assert!(body.len() <= BODY_BYTES_MAX);
    }
    if let Ok(path) = std::str::from_utf8(&data[head.path.start as usize..head.path.end as usize]) {
        let _ = http::percent_decode(path, false);
    }
    if let Ok(query) = std::str::from_utf8(&data[head.query.start as usize..head.query.end as usize]) {
        if let Ok(params) = QueryParams::parse(query) {
            let _ = params.get("index");
            let _ = params.has("recurse");
        }
    }
});
