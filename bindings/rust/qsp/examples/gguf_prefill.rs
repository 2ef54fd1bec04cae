//! Opens the GGUF file named on the command line, prefills ten token ids and
//! prints the five most likely next tokens (the same program as in the other
//! bindings' READMEs).
//!
//! Run: `cargo run --example gguf_prefill -- tiny.gguf` (a file from
//! `qsp synth --preset tiny tiny.gguf`).
use qsp::{Backend, Context, ExecOptions};

fn main() -> qsp::Result<()> {
    let path = std::env::args().nth(1).expect("usage: gguf_prefill MODEL.gguf");
    let tokens = [1, 7, 42, 100, 255, 0, 128, 64, 3, 200];
    let opts = ExecOptions { backend: Backend::Cpu, n_threads: 2, ..ExecOptions::default() };
    let mut ctx = Context::from_gguf(&path, &opts)?;
    ctx.prefill(&tokens)?;
    let logits = ctx.logits()?;
    let mut top: Vec<usize> = (0..logits.len()).collect();
    top.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    println!("top 5 of {} logits after {} tokens:", logits.len(), tokens.len());
    for &t in &top[..5] {
        println!("{} {:.4}", t, logits[t]);
    }
    Ok(())
}
