use std::io::Write;

use axum::http::{header, HeaderMap, HeaderValue};

use super::body::{encoding, inflate, is_gzip, OtlpError};
use super::Encoding;

fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
    }
    h
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn content_types_of_both_otlp_encodings_are_recognised_and_others_refused() {
    let of = |ct: &str| encoding(&headers(&[(header::CONTENT_TYPE, ct)]));
    assert_eq!(of("application/x-protobuf").unwrap(), Encoding::Protobuf);
    assert_eq!(
        of("application/json; charset=utf-8").unwrap(),
        Encoding::Json
    );
    assert!(matches!(
        of("text/plain"),
        Err(OtlpError::UnsupportedType(_))
    ));
    assert!(matches!(
        encoding(&HeaderMap::new()),
        Err(OtlpError::UnsupportedType(_))
    ));
}

#[test]
fn gzip_bodies_inflate_within_the_limit_and_bombs_stop_at_it() {
    assert!(is_gzip(&headers(&[(header::CONTENT_ENCODING, "gzip")])).unwrap());
    assert!(!is_gzip(&HeaderMap::new()).unwrap());
    assert!(matches!(
        is_gzip(&headers(&[(header::CONTENT_ENCODING, "br")])),
        Err(OtlpError::UnsupportedEncoding(_))
    ));
    assert_eq!(inflate(&gzip(b"hello"), 5).unwrap(), b"hello");
    let bomb = gzip(&vec![0u8; 10 * 1024 * 1024]);
    assert!(bomb.len() < 64 * 1024);
    assert!(matches!(
        inflate(&bomb, 1024 * 1024),
        Err(OtlpError::TooLarge { limit: 1_048_576 })
    ));
    assert!(matches!(
        inflate(b"not gzip", 100),
        Err(OtlpError::BadRequest(_))
    ));
}
