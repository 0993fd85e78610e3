//! `agnhost` for wasmpod: a guest whose behaviour is a script given as argv, so one module can
//! play every container of the conformance scenarios.
//!
//! Words, run left to right:
//! `print TEXT`, `eprint TEXT`, `sleep MS`, `exit CODE`, `trap`, `loop` (spin forever),
//! `alloc MIB` (allocate and touch), `flood LINES`, `longline BYTES`, `args`, `env NAME`,
//! `write PATH TEXT`, `append PATH TEXT`, `cat PATH`, `exists PATH` (exit 1 if missing), `rm PATH`,
//! `count PATH` (append a line to PATH and print how many it has), `fail-after PATH N` (exit 1
//! while PATH has fewer than N lines), `wait-term` (block until TERM is requested; needs the
//! termination import), `on-term CODE DELAY_MS` (from then on, a TERM seen during `sleep` makes the
//! guest wait DELAY_MS and exit with CODE; needs the termination import).

use std::io::Write;
use std::time::Duration;

/// How the guest learns about TERM, if it imports the termination interface.
pub type TermCheck = fn() -> bool;

pub fn main(term: Option<TermCheck>) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut words = args.iter().map(String::as_str);
    let mut exit_on_term: Option<(i32, u64)> = None;
    while let Some(word) = words.next() {
        let mut arg = || words.next().unwrap_or_else(|| panic!("`{word}` needs an argument"));
        match word {
            "print" => println!("{}", arg()),
            "eprint" => eprintln!("{}", arg()),
            "sleep" => sleep(arg().parse().expect("sleep MS"), term, exit_on_term),
            "exit" => std::process::exit(arg().parse().expect("exit CODE")),
            "trap" => trap(),
            "loop" => spin(),
            "alloc" => {
                let mib: usize = arg().parse().expect("alloc MIB");
                let mut kept = Vec::new();
                for _ in 0..mib {
                    kept.push(vec![1u8; 1 << 20]);
                }
                println!("allocated {} MiB", kept.len());
            }
            "flood" => {
                let n: usize = arg().parse().expect("flood LINES");
                let mut out = std::io::stdout().lock();
                for i in 0..n {
                    writeln!(out, "flood line {i} xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx").unwrap();
                }
            }
            "longline" => {
                let n: usize = arg().parse().expect("longline BYTES");
                println!("{}", "y".repeat(n));
            }
            "args" => println!("{}", std::env::args().collect::<Vec<_>>().join(" ")),
            "env" => {
                let name = arg();
                println!("{name}={}", std::env::var(name).unwrap_or_else(|_| "<unset>".into()));
            }
            "write" => {
                let (path, text) = (arg().to_owned(), arg());
                std::fs::write(&path, format!("{text}\n")).unwrap_or_else(|e| fail(&format!("write {path}: {e}")));
            }
            "append" => {
                let (path, text) = (arg().to_owned(), arg());
                append(&path, text);
            }
            "cat" => {
                let path = arg();
                let text = std::fs::read_to_string(path).unwrap_or_else(|e| fail(&format!("cat {path}: {e}")));
                print!("{text}");
            }
            "exists" => {
                if std::fs::metadata(arg()).is_err() {
                    std::process::exit(1);
                }
            }
            "rm" => {
                let _ = std::fs::remove_file(arg());
            }
            "count" => {
                let path = arg();
                append(path, "x");
                println!("count {}", lines(path));
            }
            "fail-after" => {
                let (path, n) = (arg().to_owned(), arg().parse::<usize>().expect("fail-after PATH N"));
                append(&path, "x");
                if lines(&path) < n {
                    std::process::exit(1);
                }
            }
            "wait-term" => {
                let term = term.expect("wait-term needs the termination import");
                while !term() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                println!("got TERM");
            }
            "on-term" => {
                let code = arg().parse().expect("on-term CODE DELAY_MS");
                exit_on_term = Some((code, arg().parse().expect("on-term CODE DELAY_MS")));
            }
            other => fail(&format!("unknown word {other:?}")),
        }
    }
}

fn sleep(ms: u64, term: Option<TermCheck>, exit_on_term: Option<(i32, u64)>) {
    let (Some(term), Some((code, delay))) = (term, exit_on_term) else {
        std::thread::sleep(Duration::from_millis(ms));
        return;
    };
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(ms) {
        if term() {
            println!("got TERM, exiting with {code} in {delay} ms");
            std::thread::sleep(Duration::from_millis(delay));
            std::process::exit(code);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn append(path: &str, text: &str) {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap_or_else(|e| fail(&format!("open {path}: {e}")));
    writeln!(f, "{text}").unwrap();
}

fn lines(path: &str) -> usize {
    std::fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0)
}

fn fail(message: &str) -> ! {
    eprintln!("agnhost: {message}");
    std::process::exit(2)
}

#[inline(never)]
fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn trap() -> ! {
    #[cfg(target_family = "wasm")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_family = "wasm"))]
    std::process::abort()
}
