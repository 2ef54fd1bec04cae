//! The tokenizer (issue 18) on common/tok.gguf (QSP_TOK_GGUF; see
//! common/make_tok_gguf.py): byte-level BPE, ids 0..255 are the bytes, 259 is
//! "hello", 260 <|bos|> (added), 261 <|eos|>, 262 <|im_end|> (eot), 263
//! <think> (user-defined).
use qsp::{ModelFile, Status, Tokenizer};

const BOS: i32 = 260;
const EOS: i32 = 261;
const EOT: i32 = 262;
const THINK: i32 = 263;
const HELLO: i32 = 259;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{} is not set (ctest sets it)", name))
}

fn tok() -> Tokenizer {
    Tokenizer::from_gguf(env("QSP_TOK_GGUF")).unwrap()
}

#[test]
fn info() {
    let i = tok().info().unwrap();
    assert_eq!((i.kind, i.n_vocab, i.bos_id, i.eos_id, i.eot_id), (1, 264, Some(BOS), Some(EOS), Some(EOT)));
    assert!(i.add_bos && !i.add_eos);
    assert_eq!((i.model.as_str(), i.pre.as_str(), i.chat_template.as_str()), ("gpt2", "qwen2", "{{ messages }}"));
    assert!(i.max_piece_bytes >= 10 && !i.unicode_version.is_empty());
}

#[test]
fn round_trip() {
    let t = tok();
    for text in ["hello world", "héllo € 日本語 🙂", "", "a\nb\tc  d"] {
        let ids = t.tokenize(text, false, false).unwrap();
        assert_eq!(t.detokenize(&ids, false).unwrap(), text);
        assert_eq!(t.detokenize_bytes(&ids, false).unwrap(), text.as_bytes());
        assert_eq!(t.tokenize_bytes(text.as_bytes(), false, false).unwrap(), ids);
    }
    assert_eq!(t.tokenize("hello", false, false).unwrap(), [HELLO]);
    assert_eq!(t.tokenize("hé", false, false).unwrap(), ['h' as i32, 0xC3, 0xA9]);
}

#[test]
fn special() {
    let t = tok();
    assert_eq!(t.tokenize("hello", true, false).unwrap(), [BOS, HELLO]);
    let text = "<|im_end|><think>x";
    assert!(!t.tokenize(text, false, false).unwrap().contains(&EOT));
    assert_eq!(t.tokenize(text, false, true).unwrap(), [EOT, THINK, 'x' as i32]);
    let ids = t.tokenize(text, true, true).unwrap();
    assert_eq!(t.detokenize(&ids, false).unwrap(), format!("<|bos|>{}", text));
    assert_eq!(t.detokenize(&ids, true).unwrap(), "<think>x");
    assert_eq!(t.token_piece(BOS, false).unwrap(), b"<|bos|>");
    assert!(t.token_piece(BOS, true).unwrap().is_empty());
    assert_eq!(t.token_piece(0xE2, false).unwrap(), [0xE2]);
    assert_eq!(t.token_piece(264, false).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(t.detokenize(&[1, -1], false).unwrap_err().status(), Status::OutOfRange);
}

#[test]
fn stream_holds_back_split_character() {
    let t = tok();
    let ids = t.tokenize("a€b", false, false).unwrap();
    assert_eq!(ids, ['a' as i32, 0xE2, 0x82, 0xAC, 'b' as i32]);
    let mut s = t.stream(false).unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| s.push(i).unwrap()).collect();
    assert_eq!(pieces, ["a", "", "", "€", "b"]);
    assert_eq!(s.flush().unwrap(), "");
    assert!(s.push_bytes(0xE2).unwrap().is_empty() && s.push_bytes(0x82).unwrap().is_empty());
    assert_eq!(s.flush_bytes().unwrap(), [0xE2, 0x82]);
    assert_eq!(s.push(HELLO).unwrap(), "hello");
    let mut s = t.stream(true).unwrap();
    let out: String = [BOS, HELLO, EOS].iter().map(|&i| s.push(i).unwrap()).collect();
    assert_eq!(out + &s.flush().unwrap(), "hello");
}

#[test]
fn long_text_grows_buffers() {
    let t = tok();
    let text = "hello wörld € ".repeat(2000);
    let ids = t.tokenize(&text, true, false).unwrap();
    assert!(ids.len() > 256 && ids[0] == BOS);
    assert_eq!(t.detokenize(&ids, true).unwrap(), text);
    let mut s = t.stream(true).unwrap();
    let out: String = ids.iter().map(|&i| s.push(i).unwrap()).collect();
    assert_eq!(out + &s.flush().unwrap(), text);
}

#[test]
fn errors_and_ownership() {
    let t = {
        let f = ModelFile::open(env("QSP_TOK_GGUF")).unwrap();
        f.tokenizer().unwrap()
    }; // the file is closed; the tokenizer copied what it needs
    assert_eq!(t.tokenize("hello", true, false).unwrap(), [BOS, HELLO]);
    // the synthesized tiny model has tokenizer.ggml.model = "none"
    let e = Tokenizer::from_gguf(env("QSP_GGUF_MODEL")).unwrap_err();
    assert_eq!(e.status(), Status::Unsupported);
    assert!(e.message().contains("none"), "{}", e.message());
    assert_eq!(Tokenizer::from_gguf("/nonexistent/model.gguf").unwrap_err().status(), Status::Io);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
}
