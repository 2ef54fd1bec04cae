//! [`prefill_batch`]: several contexts of one model advanced in one call.

use crate::{check_abi, check_global, sys, Context, Error, Result, Status};

/// What one piece of [`prefill_batch`] gives its context: token ids, or
/// hidden states (`hidden_size` floats per token, row-major). One token is a
/// decode step, many a prompt (or a chunk of one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Piece<'a> {
    /// Token ids.
    Tokens(&'a [i32]),
    /// Hidden states: a whole number of `hidden_size`-wide rows.
    Embeddings(&'a [f32]),
}

/// The first libqsp version with `qsp_prefill_batch` (1.1.0), as
/// `qsp_version_number()` gives it.
pub const PREFILL_BATCH_VERSION: u32 = 10100;

/// Advances several contexts in one call (`qsp_prefill_batch`): each piece as
/// [`Context::prefill`] (or [`Context::prefill_embeddings`]) of its context
/// would; afterwards each context has its own logits and greedy token. The
/// contexts must share one model (the same weights on the same backend and
/// device).
///
/// ```
/// # fn step(a: &mut qsp::Context, b: &mut qsp::Context, next: i32) -> qsp::Result<()> {
/// qsp::prefill_batch(&mut [(&mut *a, qsp::Piece::Tokens(&[1, 7, 42])), (&mut *b, qsp::Piece::Tokens(&[next]))])
/// # }
/// ```
///
/// Each context can be in the batch only once: the pieces hold `&mut
/// Context`, so the borrow checker refuses the same context twice (and the
/// library would refuse it at run time, naming the sequence):
///
/// ```compile_fail
/// # fn step(a: &mut qsp::Context, next: i32) -> qsp::Result<()> {
/// qsp::prefill_batch(&mut [(&mut *a, qsp::Piece::Tokens(&[1, 7, 42])), (&mut *a, qsp::Piece::Tokens(&[next]))])
/// # }
/// ```
///
/// Everything is checked before anything changes: on an error (a token out
/// of range, a full context, contexts of different models, ...) the
/// [`Error`]'s message names the offending piece, 0-based (`"sequence 1:
/// ..."`), and every context is as it was.
///
/// Needs libqsp >= 1.1 (this crate links `qsp_prefill_batch`, symbol version
/// `QSP_1.1`, so a program does not even start against 1.0); checked again
/// here: an older library gives [`Status::Unsupported`].
pub fn prefill_batch(pieces: &mut [(&mut Context, Piece<'_>)]) -> Result<()> {
    check_abi()?;
    let version = unsafe { sys::qsp_version_number() };
    if version < PREFILL_BATCH_VERSION {
        return Err(Error::new(
            Status::Unsupported,
            format!("prefill_batch needs libqsp >= 1.1.0 (qsp_prefill_batch); the loaded library is {}", crate::version()),
        ));
    }
    let n_seqs = u32::try_from(pieces.len())
        .map_err(|_| Error::new(Status::OutOfRange, format!("{} pieces do not fit a u32", pieces.len())))?;
    let mut seqs = Vec::with_capacity(pieces.len());
    for (i, (ctx, piece)) in pieces.iter().enumerate() {
        let mut s = sys::qsp_batch_seq { ctx: ctx.as_ptr(), ..Default::default() };
        let n = match *piece {
            Piece::Tokens(t) => {
                s.tokens = t.as_ptr();
                t.len()
            }
            Piece::Embeddings(h) => {
                let w = ctx.hidden_size as usize;
                if w == 0 || h.len() % w != 0 {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("sequence {}: {} values are not a whole number of {}-wide rows", i, h.len(), w),
                    ));
                }
                s.embeddings = h.as_ptr();
                h.len() / w
            }
        };
        s.n_tokens = u32::try_from(n)
            .map_err(|_| Error::new(Status::OutOfRange, format!("sequence {}: {} tokens do not fit a u32", i, n)))?;
        seqs.push(s);
    }
    let seq_size = std::mem::size_of::<sys::qsp_batch_seq>() as u32;
    // The &mut borrows of `pieces` keep every context (and, through the
    // pieces' lifetimes, every token slice) alive and unshared for the call.
    check_global(unsafe { sys::qsp_prefill_batch(seqs.as_ptr(), n_seqs, seq_size) })
}
