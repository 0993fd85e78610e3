//! A WASI 0.3 (p3) command: its `wasi:cli/run@0.3` runs a script given as argv, through the
//! 0.3 interfaces only (stdio as streams, the async monotonic clock).
//!
//! Words: `print TEXT`, `eprint TEXT`, `args`, `env NAME`, `sleep MS`, `fail` (run returns an
//! error: exit 1), `spin` (compute forever), `trap`.

use wasip3::cli::{environment, stderr, stdout};

wasip3::cli::command::export!(Command);

struct Command;

async fn write(text: String, to_stderr: bool) {
    let (mut tx, rx) = wasip3::wit_stream::new();
    futures::join!(
        async {
            if to_stderr {
                stderr::write_via_stream(rx).await.unwrap();
            } else {
                stdout::write_via_stream(rx).await.unwrap();
            }
        },
        async {
            let rest = tx.write_all(format!("{text}\n").into_bytes()).await;
            assert!(rest.is_empty());
            drop(tx);
        }
    );
}

impl wasip3::exports::cli::run::Guest for Command {
    async fn run() -> Result<(), ()> {
        let args = environment::get_arguments();
        let mut words = args.iter().skip(1).map(String::as_str);
        while let Some(word) = words.next() {
            let mut arg = || words.next().expect("a word's argument").to_owned();
            match word {
                "print" => write(arg(), false).await,
                "eprint" => write(arg(), true).await,
                "args" => write(args[1..].join(" "), false).await,
                "env" => {
                    let name = arg();
                    let value = environment::get_environment()
                        .into_iter()
                        .find(|(k, _)| *k == name)
                        .map(|(_, v)| v)
                        .unwrap_or_default();
                    write(format!("{name}={value}"), false).await
                }
                "sleep" => {
                    let ms: u64 = arg().parse().unwrap();
                    wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                }
                "fail" => return Err(()),
                "spin" => loop {
                    std::hint::black_box(&args);
                },
                "trap" => panic!("trap requested"),
                other => panic!("unknown word {other:?}"),
            }
        }
        Ok(())
    }
}

fn main() {}
