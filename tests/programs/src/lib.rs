//! `agnhost` for wasmpod: a guest whose behaviour is a script given as argv, so one module can
//! play every container of the lifecycle scenarios the tests check.
//!
//! Words, run left to right:
//! `print TEXT`, `eprint TEXT`, `prompt TEXT` (print without a newline, and flush), `eprompt
//! TEXT` (the same on stderr), `sleep MS`, `exit CODE`, `trap`, `loop` (spin forever),
//! `work MILLIONS` (a fixed amount of computation), `churn THOUSANDS` (sort that many thousand
//! numbers, count them in a hash map and scan a string of them: the work of ordinary programs),
//! `alloc MIB` (allocate and touch), `flood LINES`, `eflood LINES` (on stderr), `longline BYTES`,
//! `args`, `env NAME`,
//! `stdin` (print each line of stdin as it comes, then how many there were),
//! `write PATH TEXT`, `append PATH TEXT`, `cat PATH`, `exists PATH` (exit 1 if missing), `rm PATH`,
//! `ls DIR` (sorted names), `bigfile PATH KIB`,
//! `count PATH` (append a line to PATH and print how many it has), `fail-after PATH N` (exit 1
//! while PATH has fewer than N lines), `wait-term` (block until TERM is requested; needs the
//! termination import), `on-term CODE DELAY_MS` (from then on, a TERM seen during `sleep` makes the
//! guest wait DELAY_MS and exit with CODE; needs the termination import). Network words are in
//! `net.rs`.

mod net;

use std::io::Write;
use std::time::Duration;

/// How the guest learns about TERM, if it imports the termination interface.
pub type TermCheck = fn() -> bool;

pub fn main(term: Option<TermCheck>) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut words = args.iter().map(String::as_str);
    let mut exit_on_term: Option<(i32, u64)> = None;
    let mut listeners = Vec::new();
    while let Some(word) = words.next() {
        let mut arg = || {
            words
                .next()
                .unwrap_or_else(|| panic!("`{word}` needs an argument"))
        };
        match word {
            "print" => println!("{}", arg()),
            "eprint" => eprintln!("{}", arg()),
            "prompt" => {
                print!("{}", arg());
                std::io::stdout().flush().unwrap();
            }
            "eprompt" => {
                eprint!("{}", arg());
                std::io::stderr().flush().unwrap();
            }
            "sleep" => sleep(arg().parse().expect("sleep MS"), term, exit_on_term),
            "exit" => std::process::exit(arg().parse().expect("exit CODE")),
            "trap" => trap(),
            "loop" => spin(),
            "work" => {
                let millions: u64 = arg().parse().expect("work MILLIONS");
                let mut x: u64 = 1;
                for _ in 0..millions * 1_000_000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                println!("worked {millions}M {}", x & 1);
            }
            "churn" => {
                let n = arg().parse::<usize>().expect("churn THOUSANDS") * 1000;
                println!("churned {}", churn(n));
            }
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
            "eflood" => {
                let n: usize = arg().parse().expect("eflood LINES");
                let mut err = std::io::stderr().lock();
                for i in 0..n {
                    writeln!(err, "stderr flood line {i} xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx").unwrap();
                }
            }
            "longline" => {
                let n: usize = arg().parse().expect("longline BYTES");
                println!("{}", "y".repeat(n));
            }
            "args" => println!("{}", std::env::args().collect::<Vec<_>>().join(" ")),
            "stdin" => {
                // Each line read is printed back as it comes, then how many there were.
                let mut lines = 0;
                for line in std::io::stdin().lines() {
                    println!(
                        "read: {}",
                        line.unwrap_or_else(|e| fail(&format!("stdin: {e}")))
                    );
                    lines += 1;
                }
                println!("stdin ended after {lines} lines");
            }
            "env" => {
                let name = arg();
                println!(
                    "{name}={}",
                    std::env::var(name).unwrap_or_else(|_| "<unset>".into())
                );
            }
            "write" => {
                let (path, text) = (arg().to_owned(), arg());
                std::fs::write(&path, format!("{text}\n"))
                    .unwrap_or_else(|e| fail(&format!("write {path}: {e}")));
            }
            "append" => {
                let (path, text) = (arg().to_owned(), arg());
                append(&path, text);
            }
            "cat" => {
                let path = arg();
                let text = std::fs::read_to_string(path)
                    .unwrap_or_else(|e| fail(&format!("cat {path}: {e}")));
                // Always end with a newline, so files without one stay a line of their own.
                if text.ends_with('\n') {
                    print!("{text}");
                } else {
                    println!("{text}");
                }
            }
            "exists" => {
                if std::fs::metadata(arg()).is_err() {
                    std::process::exit(1);
                }
            }
            "ls" => {
                let dir = arg();
                let mut names: Vec<String> = std::fs::read_dir(dir)
                    .unwrap_or_else(|e| fail(&format!("ls {dir}: {e}")))
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                println!("ls {dir}: {}", names.join(" "));
            }
            "bigfile" => {
                let (path, kib) = (
                    arg().to_owned(),
                    arg().parse::<usize>().expect("bigfile PATH KIB"),
                );
                std::fs::write(&path, vec![b'z'; kib * 1024])
                    .unwrap_or_else(|e| fail(&format!("bigfile {path}: {e}")));
                println!("wrote {kib} KiB to {path}");
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
                let (path, n) = (
                    arg().to_owned(),
                    arg().parse::<usize>().expect("fail-after PATH N"),
                );
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
            other => {
                if !net::run(other, &mut arg, &mut listeners) {
                    fail(&format!("unknown word {other:?}"))
                }
            }
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
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| fail(&format!("open {path}: {e}")));
    writeln!(f, "{text}").unwrap();
}

fn lines(path: &str) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn fail(message: &str) -> ! {
    eprintln!("agnhost: {message}");
    std::process::exit(2)
}

#[inline(never)]
pub(crate) fn spin() -> ! {
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

/// Probe and hook handlers driven by files, shared by the preview1 exports and the preview2
/// `probed` component. `$PROBE_DIR` (default `/probe`) holds the files:
/// - probe KIND succeeds while `$PROBE_DIR/KIND` exists; `KIND.hang` makes it never return;
/// - each hook appends its name to `$PROBE_DIR/hooks.log` and then waits `$PRE_STOP_MS` or
///   `$POST_START_MS` (`forever` never returns); `$POST_START_FAIL` makes postStart fail.
pub mod handlers {
    use std::time::Duration;

    fn dir() -> String {
        std::env::var("PROBE_DIR").unwrap_or_else(|_| "/probe".into())
    }

    pub fn probe(kind: &str) -> Result<(), String> {
        let dir = dir();
        if std::fs::metadata(format!("{dir}/{kind}.hang")).is_ok() {
            super::spin();
        }
        match std::fs::metadata(format!("{dir}/{kind}")) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("{dir}/{kind}: {e}")),
        }
    }

    pub fn hook(name: &str, wait_var: &str) -> Result<(), String> {
        super::append(&format!("{}/hooks.log", dir()), name);
        match std::env::var(wait_var).as_deref() {
            Ok("forever") => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            Ok(ms) => std::thread::sleep(Duration::from_millis(ms.parse().unwrap_or(0))),
            Err(_) => {}
        }
        if name == "post-start" && std::env::var("POST_START_FAIL").is_ok() {
            return Err("POST_START_FAIL is set".into());
        }
        Ok(())
    }
}

/// Defines the preview1 exports `wasmpod_probe_*`, `wasmpod_post_start`, `wasmpod_pre_stop`.
#[macro_export]
macro_rules! p1_exports {
    () => {
        fn __code(r: Result<(), String>) -> i32 {
            match r {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            }
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn wasmpod_probe_liveness() -> i32 {
            __code($crate::handlers::probe("liveness"))
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn wasmpod_probe_readiness() -> i32 {
            __code($crate::handlers::probe("readiness"))
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn wasmpod_probe_startup() -> i32 {
            __code($crate::handlers::probe("startup"))
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn wasmpod_post_start() -> i32 {
            __code($crate::handlers::hook("post-start", "POST_START_MS"))
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn wasmpod_pre_stop() -> i32 {
            __code($crate::handlers::hook("pre-stop", "PRE_STOP_MS"))
        }
    };
}

/// Sorts `n` pseudo-random numbers, counts them by residue in a hash map and scans a string made
/// of them; a digest of the results.
fn churn(n: usize) -> u64 {
    let mut x: u64 = 88172645463325252;
    let mut numbers: Vec<u64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    numbers.sort_unstable();
    let mut counts = std::collections::HashMap::<u64, u64>::new();
    for (i, v) in numbers.iter().enumerate() {
        *counts.entry(v % 100_003).or_default() += i as u64;
    }
    let text: String = numbers
        .iter()
        .take(n / 10)
        .map(|v| char::from(b'a' + (v % 26) as u8))
        .collect();
    let words = text
        .as_bytes()
        .chunks(7)
        .filter(|c| c.contains(&b'e'))
        .count();
    numbers.get(n / 2).copied().unwrap_or(0) % 1000 + counts.len() as u64 + words as u64
}
