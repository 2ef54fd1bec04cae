//! A one-layer model with F32 weights from a formula: prefill six tokens,
//! print the greedy next token, and show an error.
//!
//! Run: `cargo run --example prefill` (see bindings/rust/README.md).
use qsp::{Backend, Context, LayerWeights, OutputWeights, Params, Tensor};

/// Norm vectors are 1.0; matrices ((31 i + 17 handle) mod 23 - 11) / 64.
fn values(handle: u64, rows: u64, cols: u64) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| if rows == 1 { 1.0 } else { (((31 * i + 17 * handle) % 23) as i32 - 11) as f32 / 64.0 })
        .collect()
}

fn main() -> qsp::Result<()> {
    let mut p = Params::default();
    p.n_layers = 1;
    p.hidden_size = 32;
    p.intermediate_size = 64;
    p.n_heads = 2;
    p.n_kv_heads = 1;
    p.head_dim = 16;
    p.vocab_size = 64;
    p.max_seq_len = 16;
    p.backend = Backend::Cpu;
    p.n_threads = 1;
    let mut ctx = Context::new(&p)?;

    let (h, f, d, q, kv, vocab) = (32u64, 64u64, 16u64, 32u64, 16u64, 64u64);
    let shapes = [(1, h), (q, h), (kv, h), (kv, h), (1, d), (1, d), (h, q), (1, h), (f, h), (f, h), (h, f)];
    let data: Vec<Vec<f32>> = shapes.iter().enumerate().map(|(i, &(r, c))| values(0x100 + i as u64, r, c)).collect();
    let t = |i: usize| Tensor::from_f32(0x100 + i as u64, shapes[i].0, shapes[i].1, &data[i]);
    let layer = LayerWeights {
        attn_norm: t(0),
        wq: t(1),
        wk: t(2),
        wv: t(3),
        q_norm: Some(t(4)),
        k_norm: Some(t(5)),
        wo: t(6),
        ffn_norm: t(7),
        w_gate: t(8),
        w_up: t(9),
        w_down: t(10),
    };
    ctx.upload_layer(0, &layer)?;
    let (embd, norm, head) = (values(0x120, vocab, h), values(0x121, 1, h), values(0x122, vocab, h));
    ctx.upload_embedding(&Tensor::from_f32(0x120, vocab, h, &embd))?;
    ctx.upload_output(&OutputWeights {
        norm: Tensor::from_f32(0x121, 1, h, &norm),
        lm_head: Tensor::from_f32(0x122, vocab, h, &head),
    })?;

    ctx.prefill(&[3, 14, 15, 9, 2, 6])?;
    let logits: &[f32] = ctx.logits()?; // borrowed from ctx: no prefill while it lives
    println!("{} logits; greedy next token: {}", logits.len(), ctx.greedy_token()?);

    match ctx.upload_layer(1, &layer) {
        // the model has one layer
        Err(e) => println!("error: {:?} - {}", e.status(), e.message()),
        Ok(()) => println!("no error?"),
    }
    Ok(())
}
