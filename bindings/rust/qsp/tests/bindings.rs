//! Tests of the Rust binding (run by ctest as bindings.rust, one thread: the
//! leak test reads the process-wide weight cache).
//!
//! Environment (set by bindings/CMakeLists.txt):
//!   QSP_REF_LOGITS    logits written by bindings/common/ref_logits.c
//!   QSP_FAKE_ABI_DIR  a directory with a stub libqsp.so.1 reporting ABI 2
use qsp::{Backend, Context, DType, LayerWeights, OutputWeights, Params, Status, Tensor};

const BASE: u64 = 0x5153500000000000;
const TOKENS: [i32; 10] = [1, 7, 42, 100, 255, 0, 128, 64, 3, 200];
const N_TENSORS: u64 = 2 * 11 + 3;

/// One tensor of tiny-v1 (bindings/common/MODEL.md).
struct Host {
    handle: u64,
    dtype: DType,
    rows: u64,
    cols: u64,
    bytes: Vec<u8>,
}

impl Host {
    fn gen(handle: u64, dtype: DType, rows: u64, cols: u64) -> Host {
        let mut s = handle.wrapping_mul(0x9E3779B97F4A7C15);
        let mut next = || {
            let mut x = s;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s = x;
            x
        };
        let mut b = Vec::new();
        match dtype {
            DType::F32 => {
                for _ in 0..rows * cols {
                    let bits = 0x3F00_0000u32 | (next() >> 41) as u32;
                    b.extend_from_slice(&bits.to_le_bytes());
                }
            }
            DType::Q8_0 => {
                for _ in 0..rows * cols / 32 {
                    b.extend_from_slice(&(0x1400u16 | (next() & 0x3FF) as u16).to_le_bytes());
                    for _ in 0..4 {
                        b.extend_from_slice(&next().to_le_bytes());
                    }
                }
            }
            DType::Q4_0 => {
                for _ in 0..rows * cols / 32 {
                    b.extend_from_slice(&(0x2000u16 | (next() & 0x3FF) as u16).to_le_bytes());
                    for _ in 0..2 {
                        b.extend_from_slice(&next().to_le_bytes());
                    }
                }
            }
            _ => unreachable!(),
        }
        assert_eq!(b.len() as u64, dtype.size(rows, cols));
        Host { handle, dtype, rows, cols, bytes: b }
    }
    fn view(&self) -> Tensor<'_> {
        Tensor::new(self.handle, self.dtype, self.rows, self.cols, &self.bytes)
    }
}

struct Model {
    layers: Vec<Vec<Host>>,
    embd: Host,
    norm: Host,
    head: Host,
}

fn params() -> Params {
    let mut p = Params::default();
    p.n_layers = 2;
    p.hidden_size = 64;
    p.intermediate_size = 128;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.head_dim = 16;
    p.vocab_size = 256;
    p.max_seq_len = 32;
    p.backend = Backend::Cpu;
    p.n_threads = 2;
    p
}

impl Model {
    fn new() -> Model {
        let (h, f, d, q, kv) = (64u64, 128u64, 16u64, 64u64, 32u64);
        let mut layers = Vec::new();
        for l in 0..2u64 {
            let wt = if l % 2 == 0 { DType::Q4_0 } else { DType::Q8_0 };
            let b = BASE + 0x100 * (l + 1);
            let shapes = [
                (DType::F32, 1, h),
                (wt, q, h),
                (wt, kv, h),
                (wt, kv, h),
                (DType::F32, 1, d),
                (DType::F32, 1, d),
                (wt, h, q),
                (DType::F32, 1, h),
                (wt, f, h),
                (wt, f, h),
                (wt, h, f),
            ];
            layers.push(
                shapes.iter().enumerate().map(|(s, &(dt, r, c))| Host::gen(b + s as u64, dt, r, c)).collect(),
            );
        }
        Model {
            layers,
            embd: Host::gen(BASE + 1, DType::Q8_0, 256, h),
            norm: Host::gen(BASE + 2, DType::F32, 1, h),
            head: Host::gen(BASE + 3, DType::Q4_0, 256, h),
        }
    }

    fn layer(&self, l: usize) -> LayerWeights<'_> {
        let t = &self.layers[l];
        LayerWeights {
            attn_norm: t[0].view(),
            wq: t[1].view(),
            wk: t[2].view(),
            wv: t[3].view(),
            q_norm: Some(t[4].view()),
            k_norm: Some(t[5].view()),
            wo: t[6].view(),
            ffn_norm: t[7].view(),
            w_gate: t[8].view(),
            w_up: t[9].view(),
            w_down: t[10].view(),
        }
    }

    fn context(&self) -> qsp::Result<Context> {
        self.context_with(&params())
    }

    fn context_with(&self, p: &Params) -> qsp::Result<Context> {
        let mut ctx = Context::new(p)?;
        for l in 0..self.layers.len() {
            ctx.upload_layer(l as u32, &self.layer(l))?;
        }
        ctx.upload_embedding(&self.embd.view())?;
        ctx.upload_output(&OutputWeights { norm: self.norm.view(), lm_head: self.head.view() })?;
        Ok(ctx)
    }
}

fn reference() -> Option<Vec<u8>> {
    let path = match std::env::var_os("QSP_REF_LOGITS") {
        Some(p) => p,
        None => {
            eprintln!("QSP_REF_LOGITS not set (ctest sets it): skipping the comparison");
            return None;
        }
    };
    let b = std::fs::read(&path).expect("read QSP_REF_LOGITS");
    assert_eq!(b.len(), 256 * 4);
    Some(b)
}

fn bytes_of(logits: &[f32]) -> Vec<u8> {
    logits.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn versions() {
    assert_eq!(qsp::abi_version(), qsp::ABI_VERSION);
    qsp::check_abi().unwrap();
    assert_eq!(qsp::version().split('.').count(), 3);
    assert_eq!(qsp::status_string(Status::OutOfRange.code()), "out of range");
    assert_eq!(DType::Q4_0.name(), "q4_0");
    assert_eq!(DType::Q8_0.size(2, 64), 2 * 2 * 34);
    assert_eq!(Status::from_code(-5), Some(Status::OutOfRange));
    assert_eq!(Status::from_code(0), None);
    assert_eq!(Status::from_code(-999), Some(Status::Unknown(-999)));
    assert!(Backend::Cpu.available());
    // The crate's copy of the status descriptions is the library's.
    for code in -20..=0 {
        let mine = Status::from_code(code).map(|s| s.description()).unwrap_or("ok");
        assert_eq!(mine, qsp::status_string(code), "status {}", code);
    }
    let p = Params::default();
    assert_eq!(p.rope_theta, 1e6);
    assert!(p.qk_norm);
}

#[test]
fn logits_bit_exact() {
    let model = Model::new();
    let mut ctx = model.context().unwrap();
    let info = ctx.info().unwrap();
    assert_eq!(info.backend, Backend::Cpu);
    assert_eq!(info.n_threads, 2);
    ctx.prefill(&TOKENS).unwrap();
    assert_eq!(ctx.kv_length().unwrap(), TOKENS.len() as u32);
    let logits = ctx.logits().unwrap();
    assert_eq!(logits.len(), 256);
    if let Some(r) = reference() {
        assert!(bytes_of(logits) == r, "logits differ from the C API's");
    }
    // argmax, lowest id on ties
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    assert_eq!(ctx.greedy_token().unwrap(), best as i32);

    // Chunked prefill, truncate, clear.
    let copy = logits.to_vec();
    ctx.kv_truncate(4).unwrap();
    assert_eq!(ctx.logits().unwrap_err().status(), Status::NotReady);
    ctx.prefill(&TOKENS[4..]).unwrap();
    assert!(bytes_of(ctx.logits().unwrap()) == bytes_of(&copy));
    ctx.kv_clear().unwrap();
    assert_eq!(ctx.kv_length().unwrap(), 0);
    ctx.prefill(&TOKENS[..4]).unwrap();
    ctx.prefill(&TOKENS[4..]).unwrap();
    assert!(bytes_of(ctx.logits().unwrap()) == bytes_of(&copy));
}

#[test]
fn errors_carry_status_and_message() {
    let model = Model::new();
    let mut ctx = model.context().unwrap();
    let e = ctx.upload_layer(5, &model.layer(0)).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    assert_eq!(e.code(), -5);
    assert_eq!(e.message(), "layer 5 out of range (the model has 2 layers)");
    assert_eq!(e.message(), ctx.last_error());
    assert!(e.to_string().contains("out of range") && e.to_string().contains("layer 5"));

    let e = ctx.prefill(&[1, 256]).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(e.message().contains("256"), "{}", e);
    assert_eq!(ctx.kv_length().unwrap(), 0);
    assert_eq!(ctx.prefill(&[]).unwrap_err().status(), Status::InvalidArgument);

    let short = &model.norm.bytes[..model.norm.bytes.len() - 4];
    let bad = Tensor::new(model.norm.handle, DType::F32, 1, 64, short);
    let e = ctx.upload_output(&OutputWeights { norm: bad, lm_head: model.head.view() }).unwrap_err();
    assert_eq!(e.status(), Status::DType);
    assert!(e.message().contains("output_norm"), "{}", e);

    assert_eq!(ctx.prefill_embeddings(&[0.0; 65]).unwrap_err().status(), Status::InvalidArgument);

    // A failing global call: the message is the thread's qsp_last_error().
    let mut p = params();
    p.n_layers = 0;
    let e = Context::new(&p).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert_eq!(e.message(), "n_layers must be > 0");
    let e = qsp::cache_stats(Backend::Auto, 0).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn dropping_contexts_leaks_nothing() {
    let model = Model::new();
    let base = qsp::cache_stats(Backend::Cpu, 0).unwrap().n_tensors;
    let cycle = || {
        let mut ctx = model.context().unwrap();
        ctx.prefill(&TOKENS[..3]).unwrap();
        assert_eq!(ctx.logits().unwrap().len(), 256);
        assert_eq!(qsp::cache_stats(Backend::Cpu, 0).unwrap().n_tensors, base + N_TENSORS);
    }; // dropped here
    for _ in 0..20 {
        cycle();
    }
    let rss0 = rss_bytes();
    for _ in 0..200 {
        cycle();
    }
    let grown = rss_bytes().saturating_sub(rss0);
    assert_eq!(qsp::cache_stats(Backend::Cpu, 0).unwrap().n_tensors, base);
    assert!(grown < 8 << 20, "RSS grew by {} bytes over 200 contexts", grown);
}

/// Runs in a child process with the stub library first on LD_LIBRARY_PATH.
#[test]
fn abi_child() {
    if std::env::var_os("QSP_ABI_CHILD").is_none() {
        return;
    }
    let e = Context::new(&params()).unwrap_err();
    assert_eq!(e.status(), Status::Unsupported);
    println!("ABI-CHILD: {}", e.message());
}

#[test]
fn abi_mismatch_is_refused() {
    let dir = match std::env::var("QSP_FAKE_ABI_DIR") {
        Ok(d) => d,
        Err(_) => {
            eprintln!("QSP_FAKE_ABI_DIR not set (ctest sets it): skipping");
            return;
        }
    };
    let ld = format!("{}:{}", dir, std::env::var("LD_LIBRARY_PATH").unwrap_or_default());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "abi_child", "--nocapture", "--test-threads=1"])
        .env("QSP_ABI_CHILD", "1")
        .env("LD_LIBRARY_PATH", ld)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {}{}", stdout, String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("ABI-CHILD: ABI mismatch: the loaded libqsp has ABI version 2, but the qsp crate was written for ABI version 1"),
        "{}",
        stdout
    );
}

// ---- prefill_batch (qsp_prefill_batch, libqsp >= 1.1) ---------------------------------
// A prompt, a decode step on an existing cache and an embeddings piece must
// leave each context exactly as Context::prefill / prefill_embeddings do (CPU:
// bit for bit); an invalid batch gives an Error naming the sequence and
// changes nothing.

/// n x 64 exact f32 values (multiples of 1/64).
fn hidden_states(n: usize) -> Vec<f32> {
    (0..n * 64).map(|i| ((i * 37) % 101) as f32 / 64.0 - 50.0 / 64.0).collect()
}

/// Three contexts: empty, with TOKENS[..6] in its cache, empty.
fn trio(m: &Model) -> Vec<Context> {
    let mut cs = vec![m.context().unwrap(), m.context().unwrap(), m.context().unwrap()];
    cs[1].prefill(&TOKENS[..6]).unwrap();
    cs
}

/// (kv length, logits bytes, greedy token); no logits: (kv, empty, -1).
fn state(c: &Context) -> (u32, Vec<u8>, i32) {
    let kv = c.kv_length().unwrap();
    match c.logits() {
        Ok(l) => (kv, bytes_of(l), c.greedy_token().unwrap()),
        Err(e) => {
            assert_eq!(e.status(), Status::NotReady);
            (kv, Vec::new(), -1)
        }
    }
}

#[test]
fn prefill_batch_equals_single_prefills() {
    let m = Model::new();
    let embd = hidden_states(3);
    let mut b = trio(&m);
    {
        let [b0, b1, b2] = <&mut [Context; 3]>::try_from(&mut b[..]).unwrap();
        qsp::prefill_batch(&mut [
            (b0, qsp::Piece::Tokens(&TOKENS)),
            (b1, qsp::Piece::Tokens(&TOKENS[6..7])),
            (b2, qsp::Piece::Embeddings(&embd)),
        ])
        .unwrap();
    }
    let mut s = trio(&m);
    s[0].prefill(&TOKENS).unwrap();
    s[1].prefill(&TOKENS[6..7]).unwrap();
    s[2].prefill_embeddings(&embd).unwrap();
    for i in 0..3 {
        let want = state(&s[i]);
        assert!(!want.1.is_empty());
        assert!(state(&b[i]) == want, "piece {}: kv, logits bit for bit, greedy token", i);
    }
    assert_eq!(b.iter().map(|c| c.kv_length().unwrap()).collect::<Vec<_>>(), vec![10, 7, 3]);
    let l = b[0].logits().unwrap();
    let best = (0..l.len()).fold(0, |best, t| if l[t] > l[best] { t } else { best });
    assert_eq!(b[0].greedy_token().unwrap(), best as i32);
    if let Some(r) = reference() {
        assert_eq!(bytes_of(l), r, "the batch's prompt logits are ref_logits.c's");
    }
}

#[test]
fn prefill_batch_invalid_changes_nothing() {
    let m = Model::new();
    let mut b = trio(&m);
    {
        let (b0, rest) = b.split_first_mut().unwrap();
        qsp::prefill_batch(&mut [(b0, qsp::Piece::Tokens(&TOKENS[..4])), (&mut rest[1], qsp::Piece::Tokens(&[5]))])
            .unwrap();
    }
    let before: Vec<_> = b.iter().map(state).collect();
    let unchanged = |b: &[Context], what: &str| {
        for (i, c) in b.iter().enumerate() {
            assert!(state(c) == before[i], "{}: context {} changed", what, i);
        }
    };

    // Token 256 is out of range (vocabulary 256) in sequence 1.
    let e = {
        let [b0, b1, b2] = <&mut [Context; 3]>::try_from(&mut b[..]).unwrap();
        qsp::prefill_batch(&mut [
            (b0, qsp::Piece::Tokens(&[3])),
            (b1, qsp::Piece::Tokens(&[4, 256])),
            (b2, qsp::Piece::Tokens(&[5])),
        ])
        .unwrap_err()
    };
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(e.message().contains("sequence 1"), "{}", e);
    unchanged(&b, "out of range");

    // Not whole rows of hidden_size in sequence 1 (the binding's own check).
    let e = {
        let [b0, _, b2] = <&mut [Context; 3]>::try_from(&mut b[..]).unwrap();
        qsp::prefill_batch(&mut [(b0, qsp::Piece::Tokens(&[3])), (b2, qsp::Piece::Embeddings(&[0.5; 70]))])
            .unwrap_err()
    };
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("sequence 1"), "{}", e);
    // No pieces.
    assert_eq!(qsp::prefill_batch(&mut []).unwrap_err().status(), Status::InvalidArgument);
    unchanged(&b, "invalid pieces");

    // The same context twice cannot be written in safe Rust (two &mut; see
    // the compile_fail example of prefill_batch). Through the raw API the
    // library refuses it, naming sequence 1, and changes nothing.
    let p = b[1].as_ptr();
    let tok = [3i32, 4];
    let seqs = [
        qsp::sys::qsp_batch_seq { ctx: p, tokens: tok.as_ptr(), n_tokens: 1, ..Default::default() },
        qsp::sys::qsp_batch_seq { ctx: p, tokens: tok[1..].as_ptr(), n_tokens: 1, ..Default::default() },
    ];
    let st = unsafe {
        qsp::sys::qsp_prefill_batch(seqs.as_ptr(), 2, std::mem::size_of::<qsp::sys::qsp_batch_seq>() as u32)
    };
    assert_eq!(Status::from_code(st), Some(Status::InvalidArgument));
    assert!(b[1].last_error().contains("sequence 1"), "{}", b[1].last_error());
    unchanged(&b, "the same context twice");

    // All still usable.
    {
        let [b0, b1, b2] = <&mut [Context; 3]>::try_from(&mut b[..]).unwrap();
        qsp::prefill_batch(&mut [
            (b0, qsp::Piece::Tokens(&[9])),
            (b1, qsp::Piece::Tokens(&[9])),
            (b2, qsp::Piece::Tokens(&[9])),
        ])
        .unwrap();
    }
    for (i, c) in b.iter().enumerate() {
        assert_eq!(c.kv_length().unwrap(), before[i].0 + 1);
    }
}

/// The README's serving loop: each request's tokens equal it decoded alone.
#[test]
fn prefill_batch_serving_loop() {
    let m = Model::new();
    let prompts: [&[i32]; 3] = [&[1, 7, 42], &[100, 255, 0, 128], &[64]];
    let mut ctxs: Vec<Context> = prompts.iter().map(|_| m.context().unwrap()).collect();
    // --- as in README.md ---
    let mut next: Vec<Vec<i32>> = prompts.iter().map(|p| p.to_vec()).collect(); // what each takes next
    let mut outputs = vec![Vec::new(); ctxs.len()];
    for _step in 0..4 {
        // Prompts and decode steps in one call.
        let mut batch: Vec<_> = ctxs.iter_mut().zip(&next).map(|(ctx, t)| (ctx, qsp::Piece::Tokens(t))).collect();
        qsp::prefill_batch(&mut batch).unwrap();
        drop(batch);
        for (i, ctx) in ctxs.iter().enumerate() {
            let t = ctx.greedy_token().unwrap();
            outputs[i].push(t);
            next[i] = vec![t]; // the next step: one token each
        }
    }
    // --- end ---
    for (i, prompt) in prompts.iter().enumerate() {
        let mut c = m.context().unwrap();
        let mut piece = prompt.to_vec();
        let mut alone = Vec::new();
        for _ in 0..4 {
            c.prefill(&piece).unwrap();
            alone.push(c.greedy_token().unwrap());
            piece = vec![*alone.last().unwrap()];
        }
        assert_eq!(outputs[i], alone, "request {}", i);
    }
}

// ---- tensor parallelism (n_devices / device_mask, libqsp >= 1.3) ----------------------
// tiny-v1 splits in two (2 KV heads, 128 FFN features; 32 columns of wo and
// 64 of w_down per shard: whole blocks). The CPU runs the shards one after
// another: logits bit for bit the unsplit model's.

fn split(n_devices: u32, device_mask: u32) -> Params {
    Params { n_devices, device_mask, ..params() }
}

#[test]
fn split_params_default_to_unsplit() {
    let p = Params::default();
    assert_eq!((p.n_devices, p.device_mask), (0, 0));
    let q = split(2, 1);
    assert_eq!((q.n_devices, q.device_mask), (2, 1));
    assert_eq!(Params { n_devices: 0, device_mask: 0, ..q.clone() }, params());
}

#[test]
fn split_in_two_is_bit_identical() {
    let m = Model::new();
    let mut whole = m.context().unwrap();
    whole.prefill(&TOKENS).unwrap();
    let want = bytes_of(whole.logits().unwrap());
    if let Some(r) = reference() {
        assert!(want == r, "unsplit logits differ from the C API's");
    }
    // device_mask 0 (devices from device_index on) and one bit (every shard
    // on that device): both reach the library, which says how many shards.
    for mask in [0u32, 1] {
        let mut ctx = m.context_with(&split(2, mask)).unwrap();
        let info = ctx.info().unwrap();
        assert!(info.device_name.contains("2 shards"), "{}", info.device_name);
        assert_eq!(info.kv_cache_bytes, whole.info().unwrap().kv_cache_bytes);
        ctx.prefill(&TOKENS).unwrap();
        assert!(bytes_of(ctx.logits().unwrap()) == want, "mask {:#x}: logits differ from the unsplit model's", mask);
        assert_eq!(ctx.greedy_token().unwrap(), whole.greedy_token().unwrap());
    }
}

#[test]
fn split_that_does_not_divide_is_refused() {
    // 2 KV heads over 3 shards.
    let e = Context::new(&split(3, 0)).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(e.message().contains("n_kv_heads 2 does not divide over n_devices = 3"), "{}", e);
    // A device_mask naming 3 devices for 2 shards.
    let e = Context::new(&split(2, 0b111)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("device_mask 0x7"), "{}", e);
}
