//! GGUF model files (issue 20), against what the ctest fixture wrote (see
//! bindings/gguf/gguf_ref.c): QSP_GGUF_MODEL (`qsp synth --preset tiny --type
//! q4_0`), QSP_GGUF_REF_LOGITS (its logits, bit-identical to `qsp prefill`'s),
//! QSP_GGUF_REF_INFO, QSP_GGUF_BAD_DIR (bad files), QSP_GGUF_TOKENS.
use std::collections::HashMap;
use std::panic;

use qsp::{cache_stats, Backend, Context, DType, ExecOptions, ModelFile, Status};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{} is not set (ctest sets it)", name))
}

fn tokens() -> Vec<i32> {
    env("QSP_GGUF_TOKENS").split(',').map(|t| t.parse().unwrap()).collect()
}

fn cpu(threads: i32) -> ExecOptions {
    ExecOptions { backend: Backend::Cpu, n_threads: threads, ..ExecOptions::default() }
}

fn ref_logits() -> Vec<f32> {
    std::fs::read(env("QSP_GGUF_REF_LOGITS"))
        .unwrap()
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn info_and_tensors() {
    let want: HashMap<String, String> = std::fs::read_to_string(env("QSP_GGUF_REF_INFO"))
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let f = ModelFile::open(env("QSP_GGUF_MODEL")).unwrap();
    let i = f.info().unwrap();
    let got: Vec<(&str, String)> = vec![
        ("version", i.version.to_string()),
        ("file_size", i.file_size.to_string()),
        ("tensor_count", i.tensor_count.to_string()),
        ("kv_count", i.kv_count.to_string()),
        ("data_offset", i.data_offset.to_string()),
        ("weight_bytes", i.weight_bytes.to_string()),
        ("alignment", i.alignment.to_string()),
        ("known_architecture", (i.known_architecture as i32).to_string()),
        ("architecture", i.architecture.clone()),
        ("name", i.name.clone()),
        ("n_layers", i.n_layers.to_string()),
        ("hidden_size", i.hidden_size.to_string()),
        ("intermediate_size", i.intermediate_size.to_string()),
        ("n_heads", i.n_heads.to_string()),
        ("n_kv_heads", i.n_kv_heads.to_string()),
        ("head_dim", i.head_dim.to_string()),
        ("vocab_size", i.vocab_size.to_string()),
        ("context_length", i.context_length.to_string()),
        ("rope_style", i.rope_style.to_string()),
        ("qk_norm", i.qk_norm.to_string()),
        ("tied_embeddings", (i.tied_embeddings as i32).to_string()),
        ("file_type", i.file_type.to_string()),
    ];
    for (k, v) in got {
        assert_eq!(&v, &want[k], "{}", k);
    }
    let ts = f.tensors().unwrap();
    assert_eq!(ts.len() as u64, f.tensor_count());
    assert_eq!(ts.len().to_string(), want["tensor_count"]);
    let t0 = &ts[0];
    assert_eq!(t0.name, want["tensor0_name"]);
    assert_eq!(t0.ggml_type.to_string(), want["tensor0_type"]);
    assert_eq!(t0.dtype, Some(DType::Q4_0));
    assert_eq!(t0.type_name, want["tensor0_type_name"]);
    assert_eq!(t0.n_rows.to_string(), want["tensor0_n_rows"]);
    assert_eq!(t0.n_cols.to_string(), want["tensor0_n_cols"]);
    assert_eq!(t0.n_bytes.to_string(), want["tensor0_n_bytes"]);
    assert_eq!(t0.shape, vec![t0.n_cols, t0.n_rows]);
    assert_eq!(&f.tensor(&t0.name).unwrap(), t0);
    assert_eq!(f.tensor("no.such.tensor").unwrap_err().status(), Status::OutOfRange);
    assert_eq!(ts.iter().map(|t| t.n_bytes).sum::<u64>(), i.weight_bytes);
}

#[test]
fn logits_identical_to_c() {
    let want = ref_logits();
    let mut ctx = Context::from_gguf(env("QSP_GGUF_MODEL"), &cpu(2)).unwrap();
    ctx.prefill(&tokens()).unwrap();
    assert!(same_bits(ctx.logits().unwrap(), &want));

    // Through an open file, with a short context and progress reports.
    let f = ModelFile::open(env("QSP_GGUF_MODEL")).unwrap();
    let mut seen = Vec::new();
    let opts = ExecOptions { context_length: 64, ..cpu(2) };
    assert_eq!(f.params(&opts).unwrap().max_seq_len, 64);
    let mut ctx = f.create_context_with_progress(&opts, |done, total| seen.push((done, total))).unwrap();
    drop(f); // the context does not need the file
    ctx.prefill(&tokens()).unwrap();
    assert!(same_bits(ctx.logits().unwrap(), &want));
    assert!(!seen.is_empty());
    let total = seen[0].1;
    assert!(seen.iter().all(|&(_, t)| t == total));
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{:?}", seen);
    assert_eq!(seen.last().unwrap().0, total);
}

/// The model file split in two (ExecOptions' n_devices / device_mask reach
/// the context): the same logits bit for bit.
#[test]
fn split_context_identical_to_c() {
    let want = ref_logits();
    let f = ModelFile::open(env("QSP_GGUF_MODEL")).unwrap();
    assert_eq!((ExecOptions::default().n_devices, ExecOptions::default().device_mask), (0, 0));
    let p = f.params(&cpu(2)).unwrap();
    assert_eq!((p.n_devices, p.device_mask), (0, 0));
    let opts = ExecOptions { n_devices: 2, device_mask: 1, ..cpu(2) };
    let p = f.params(&opts).unwrap();
    assert_eq!((p.n_devices, p.device_mask), (2, 1));
    let mut ctx = f.create_context(&opts).unwrap();
    assert!(ctx.info().unwrap().device_name.contains("2 shards"), "{}", ctx.info().unwrap().device_name);
    ctx.prefill(&tokens()).unwrap();
    assert!(same_bits(ctx.logits().unwrap(), &want));
    let mut ctx = Context::from_gguf(env("QSP_GGUF_MODEL"), &ExecOptions { device_mask: 0, ..opts }).unwrap();
    ctx.prefill(&tokens()).unwrap();
    assert!(same_bits(ctx.logits().unwrap(), &want));
}

#[test]
fn bad_files() {
    let dir = env("QSP_GGUF_BAD_DIR");
    for (name, status, words) in [
        ("missing.gguf", Status::Io, "missing.gguf"),
        ("bad_truncated.gguf", Status::BadFormat, ""),
        ("bad_magic.gguf", Status::BadFormat, ""),
        ("bad_type.gguf", Status::Unsupported, "iq4_nl"),
    ] {
        let e = Context::from_gguf(format!("{}/{}", dir, name), &cpu(1)).unwrap_err();
        assert_eq!(e.status(), status, "{}: {}", name, e);
        assert!(!e.message().is_empty() && e.message().contains(words), "{}: {}", name, e);
        assert!(e.to_string().contains(e.message()));
    }
}

#[test]
fn panicking_progress_resumes_and_leaves_nothing() {
    let base = cache_stats(Backend::Cpu, 0).unwrap().n_tensors;
    let f = ModelFile::open(env("QSP_GGUF_MODEL")).unwrap();
    for _ in 0..3 {
        let mut calls = 0;
        let r = panic::catch_unwind(panic::AssertUnwindSafe(|| {
            f.create_context_with_progress(&cpu(1), |done, total| {
                calls += 1;
                if calls == 2 {
                    panic!("enough after {} of {} bytes", done, total);
                }
            })
        }));
        let payload = r.expect_err("the panic did not reach the caller");
        let msg = payload.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.starts_with("enough after"), "{:?}", msg);
        assert_eq!(calls, 2, "the closure ran again after panicking");
        assert_eq!(cache_stats(Backend::Cpu, 0).unwrap().n_tensors, base);
    }
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

#[test]
fn files_and_contexts_leak_nothing() {
    let base = cache_stats(Backend::Cpu, 0).unwrap().n_tensors;
    let path = env("QSP_GGUF_MODEL");
    let toks = tokens();
    let opts = ExecOptions { context_length: 16, ..cpu(1) };
    let cycle = || {
        let f = ModelFile::open(&path).unwrap();
        let mut ctx = f.create_context_with_progress(&opts, |_, _| {}).unwrap();
        ctx.prefill(&toks[..2]).unwrap();
    };
    for _ in 0..10 {
        cycle();
    }
    let rss0 = rss_bytes();
    for _ in 0..100 {
        cycle();
    }
    assert_eq!(cache_stats(Backend::Cpu, 0).unwrap().n_tensors, base);
    let grown = rss_bytes().saturating_sub(rss0);
    assert!(grown < 8 << 20, "RSS grew by {} bytes over 100 files and contexts", grown);
}
