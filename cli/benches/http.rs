//! HTTP handler containers against `wasmtime serve`: the same `wasi:http/proxy` component (the
//! test handler's `GET /`, a short plain-text answer) served twice in one run, by a wasmpod pod
//! through a published port and by `wasmtime serve`, each driven by the same load generator in
//! this process, alternating A B A B: 16 and 256 keep-alive connections sending GETs back to
//! back, and 16 clients each making a new connection per request (`Connection: close`), for
//! SECONDS each. Reports requests per second and per-request latency p50/p99 (from writing the
//! request, or connecting, to reading the whole response).
//!
//! `wasmtime serve` is found through `$WASMTIME` or `PATH` (wasmtime-cli 48 with its `serve`
//! feature); without it only wasmpod is measured. `cargo bench -p wasmpod-cli --bench http`;
//! writes `target/wasmpod-bench/http.json`.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wasmpod::{Node, NodeOptions, PodOptions, PodSpec};
use wasmpod_tests::free_port;

const SECONDS: f64 = 4.0;
const ROUNDS: usize = 2;

/// How the load generator drives a server: this many clients at once, on keep-alive
/// connections or a new connection per request.
#[derive(Debug, Clone, Copy)]
struct Case {
    connections: usize,
    keep_alive: bool,
}

impl Case {
    /// The name of the case's figures in the JSON (the first case's are unprefixed, as before).
    fn prefix(self) -> String {
        match (self.connections, self.keep_alive) {
            (16, true) => String::new(),
            (n, true) => format!("c{n}_"),
            (n, false) => format!("close_c{n}_"),
        }
    }
}

const CASES: [Case; 3] = [
    Case {
        connections: 16,
        keep_alive: true,
    },
    Case {
        connections: 256,
        keep_alive: true,
    },
    Case {
        connections: 16,
        keep_alive: false,
    },
];

#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
}

/// One connection's GET: the time until the whole (chunked or sized) response was read.
async fn get(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Duration> {
    request(
        stream,
        buf,
        b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n",
        Instant::now(),
    )
    .await
}

/// Sends `req` and reads the whole response: the time since `start`.
async fn request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    req: &[u8],
    start: Instant,
) -> std::io::Result<Duration> {
    stream.write_all(req).await?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if complete(buf) {
            return Ok(start.elapsed());
        }
    }
}

/// Is `buf` one whole response (a 200 with a chunked or Content-Length body)?
fn complete(buf: &[u8]) -> bool {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let body = &buf[head_end + 4..];
    match head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        Some(length) => body.len() >= length,
        None => body.ends_with(b"0\r\n\r\n"),
    }
}

/// Drives `addr` as `case` says for `seconds`.
async fn load(addr: SocketAddr, case: Case, seconds: f64) -> Figures {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let workers: Vec<_> = (0..case.connections)
        .map(|_| {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut times = Vec::new();
                if case.keep_alive {
                    let mut stream = TcpStream::connect(addr).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    while Instant::now() < deadline {
                        times.push(get(&mut stream, &mut buf).await.unwrap());
                    }
                } else {
                    let close = b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
                    while Instant::now() < deadline {
                        let start = Instant::now();
                        let mut stream = TcpStream::connect(addr).await.unwrap();
                        stream.set_nodelay(true).unwrap();
                        times.push(request(&mut stream, &mut buf, close, start).await.unwrap());
                    }
                }
                times
            })
        })
        .collect();
    let start = Instant::now();
    let mut times = Vec::new();
    for w in workers {
        times.extend(w.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    Figures {
        rps: times.len() as f64 / elapsed,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

/// Waits until something answers a GET on `addr`.
async fn until_serving(addr: SocketAddr) {
    let start = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(addr).await {
            let mut buf = Vec::new();
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_secs(5), get(&mut s, &mut buf)).await
            {
                return;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{addr} never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `wasmtime serve` of the same component, if a wasmtime is at hand.
fn wasmtime_serve(component: &str, port: u16) -> Option<Serve> {
    let wasmtime = std::env::var("WASMTIME").unwrap_or_else(|_| "wasmtime".into());
    let version = Command::new(&wasmtime).arg("--version").output().ok()?;
    println!(
        "against {}",
        String::from_utf8_lossy(&version.stdout).trim()
    );
    let child = Command::new(&wasmtime)
        .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "-Scli"])
        .args(["--env", "QUIET=1", component])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    Some(Serve(child))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::new(
        NodeOptions::default()
            .state_dir(dir.path().join("state"))
            .cache_dir(Some(wasmpod_tests::shared_cache())),
    )
    .unwrap();
    let component = wasmpod_tests::guests::HTTP_HANDLER_P2;
    let port = free_port();
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{ name: bench }}
spec:
  containers:
  - name: web
    image: {component:?}
    env: [ {{ name: QUIET, value: "1" }} ]
    ports: [ {{ containerPort: 8080, hostPort: {port} }} ]
"#
    );
    let pod = node
        .create_pod(
            PodSpec::from_yaml(&yaml, dir.path()).unwrap(),
            PodOptions::default(),
        )
        .await
        .unwrap();
    let wasmpod_addr: SocketAddr = ([127, 0, 0, 1], port).into();
    until_serving(wasmpod_addr).await;

    let serve_port = free_port();
    let serve = wasmtime_serve(component, serve_port);
    let serve_addr: SocketAddr = ([127, 0, 0, 1], serve_port).into();
    if serve.is_some() {
        until_serving(serve_addr).await;
    } else {
        println!("no wasmtime found (set WASMTIME): measuring wasmpod only");
    }

    // Warm both up (compiled code paged in, connection pools, the allocator).
    load(wasmpod_addr, CASES[0], 0.5).await;
    if serve.is_some() {
        load(serve_addr, CASES[0], 0.5).await;
    }
    let best = |f: &[Figures]| {
        f.iter()
            .copied()
            .max_by(|a, b| a.rps.total_cmp(&b.rps))
            .unwrap_or_default()
    };
    let mut results = serde_json::Map::new();
    println!("best of {ROUNDS} runs of {SECONDS} s a case, GET / of the test handler");
    for case in CASES {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            ours.push(load(wasmpod_addr, case, SECONDS).await);
            if serve.is_some() {
                theirs.push(load(serve_addr, case, SECONDS).await);
            }
        }
        let (ours, theirs) = (best(&ours), best(&theirs));
        let how = if case.keep_alive {
            "keep-alive connections"
        } else {
            "clients, a connection per request"
        };
        println!("{} {how}", case.connections);
        println!(
            "  wasmpod pod (published port)  {:>9.0} req/s  p50 {:>7.0} us  p99 {:>7.0} us",
            ours.rps, ours.p50_us, ours.p99_us
        );
        if theirs.rps > 0.0 {
            println!(
                "  wasmtime serve                {:>9.0} req/s  p50 {:>7.0} us  p99 {:>7.0} us",
                theirs.rps, theirs.p50_us, theirs.p99_us
            );
            println!(
                "  ratio wasmpod / wasmtime       {:>9.2} (req/s)  {:.2} (p50)  {:.2} (p99)",
                ours.rps / theirs.rps,
                ours.p50_us / theirs.p50_us,
                ours.p99_us / theirs.p99_us
            );
        }
        let p = case.prefix();
        for (key, value) in [
            ("wasmpod_rps", ours.rps),
            ("wasmpod_p50_us", ours.p50_us),
            ("wasmpod_p99_us", ours.p99_us),
            ("wasmtime_serve_rps", theirs.rps),
            ("wasmtime_serve_p50_us", theirs.p50_us),
            ("wasmtime_serve_p99_us", theirs.p99_us),
        ] {
            results.insert(format!("{p}{key}"), json!(value));
        }
    }
    drop(serve);
    pod.delete(Some(Duration::ZERO));
    pod.deleted().await;
    let results = serde_json::Value::Object(results);
    wasmpod_tests::compare_bench(
        "http",
        &results,
        &[
            "wasmpod_rps",
            "wasmpod_p50_us",
            "wasmpod_p99_us",
            "wasmtime_serve_rps",
        ],
    );
    wasmpod_tests::save_bench("http", &results);
}
