//! The crate's constants against include/qsp/qsp.h (issue 14): every
//! `QSP_DTYPE_*`, status (`QSP_OK` / `QSP_ERR_*`), `QSP_BACKEND_*` and
//! `QSP_ROPE_*` the header defines is in the safe enums with the same value,
//! and nothing else; the library names and sizes every [`DType`].
//!
//! Environment: QSP_HEADER_DIR, the directory of qsp.h (ctest sets it).
use std::collections::BTreeMap;

use qsp::{Backend, DType, RopeStyle, Status};

/// `#define QSP_<prefix><NAME> <int>` of qsp.h, as NAME -> value.
fn header(prefix: &str) -> BTreeMap<String, i32> {
    let dir = std::env::var("QSP_HEADER_DIR").expect("QSP_HEADER_DIR is not set (ctest sets it)");
    let text = std::fs::read_to_string(format!("{}/qsp.h", dir)).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("#define") {
            continue;
        }
        let (name, value) = match (w.next(), w.next()) {
            (Some(n), Some(v)) => (n, v.trim_matches(|c| c == '(' || c == ')')),
            _ => continue,
        };
        let value: i32 = match value.parse() {
            Ok(v) => v,
            Err(_) => continue,
        };
        if prefix == "QSP_ERR_" && name == "QSP_OK" {
            out.insert("OK".to_string(), value);
        } else if let Some(rest) = name.strip_prefix(prefix) {
            out.insert(rest.to_string(), value);
        }
    }
    assert!(!out.is_empty(), "no {}* in qsp.h", prefix);
    out
}

/// "InvalidArgument" -> "INVALID_ARGUMENT"; "Q4_0" -> "Q4_0".
fn upper_snake(debug: &str) -> String {
    let mut s = String::new();
    for (i, c) in debug.chars().enumerate() {
        if i > 0 && c.is_ascii_uppercase() && debug.as_bytes()[i - 1].is_ascii_lowercase() {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

fn mirror<T: std::fmt::Debug + Copy>(all: &[T], value: impl Fn(T) -> i32) -> BTreeMap<String, i32> {
    all.iter().map(|&v| (upper_snake(&format!("{:?}", v)), value(v))).collect()
}

#[test]
fn dtypes_match_header() {
    assert_eq!(mirror(DType::ALL, |d| d as i32), header("QSP_DTYPE_"));
}

#[test]
fn statuses_match_header() {
    let mut have = mirror(Status::ALL, |s| s.code());
    have.insert("OK".to_string(), 0);
    assert_eq!(have, header("QSP_ERR_"));
    assert!(Status::from_code(0).is_none());
    for &s in Status::ALL {
        assert_eq!(Status::from_code(s.code()), Some(s));
    }
}

#[test]
fn backends_and_rope_styles_match_header() {
    assert_eq!(mirror(Backend::ALL, |b| b as i32), header("QSP_BACKEND_"));
    assert_eq!(mirror(RopeStyle::ALL, |r| r as i32), header("QSP_ROPE_"));
}

#[test]
fn library_names_and_sizes_every_dtype() {
    for &d in DType::ALL {
        let name = d.name();
        assert_eq!(name.to_ascii_uppercase(), format!("{:?}", d).to_ascii_uppercase(), "{:?}", d);
        assert_eq!(qsp::gguf_type_name(d as i32), name);
        assert!(d.size(1, 256) > 0, "{:?}", d); // 256: a multiple of every block size
        assert_eq!(DType::from_raw(d as i32), Some(d));
    }
}
