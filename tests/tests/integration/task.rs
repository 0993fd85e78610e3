//! `wasmpod::task`: containers run where containerd keeps the pod (what the containerd shim
//! runs), through the library: exit codes, TERM, the memory limit, mounts, stdio, exec, usage
//! and resizing, one engine for many tasks.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use std::sync::{Arc, LazyLock};

use wasmpod::task::{ResizeError, Task, TaskEngine, TaskIo, TaskOptions};
use wasmpod_tests::guests;

/// One engine for the tests' tasks, as the shim has one per process.
static ENGINE: LazyLock<TaskEngine> = LazyLock::new(|| TaskEngine::new(None).unwrap());

fn task(wasm: &str, args: &[&str], options: impl FnOnce(TaskOptions) -> TaskOptions) -> Task {
    let argv = std::iter::once("app.wasm").chain(args.iter().copied());
    let bytes = std::fs::read(wasm).unwrap();
    ENGINE
        .task("app.wasm".as_ref(), &bytes, options(TaskOptions::new(argv)))
        .unwrap()
}

/// A writer whose bytes the test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

fn captured() -> (TaskIo, Captured, Captured) {
    let (out, err) = (Captured::default(), Captured::default());
    (
        TaskIo::new().stdout(out.clone()).stderr(err.clone()),
        out,
        err,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_and_traps() {
    for wasm in [guests::AGNHOST_P1, guests::AGNHOST_P2] {
        let exit = task(wasm, &["exit", "3"], |o| o).run(TaskIo::new()).await;
        assert_eq!(
            (exit.code, exit.oom),
            (if wasm == guests::AGNHOST_P1 { 3 } else { 1 }, false)
        );
        let (io, out, err) = captured();
        let exit = task(wasm, &["print", "before", "trap"], |o| o)
            .run(io)
            .await;
        assert_eq!(exit.code, 134);
        assert!(exit.message.unwrap().contains("unreachable"));
        // Why it ended is the last of its stderr, after its own output.
        assert_eq!(out.text(), "before\n");
        assert!(
            err.text().starts_with("wasmpod: wasm trap"),
            "{}",
            err.text()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mounts_env_and_read_only_directories() {
    let dir = tempfile::tempdir().unwrap();
    let (ro, rw) = (dir.path().join("ro"), dir.path().join("rw"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::create_dir(&rw).unwrap();
    let exit = task(
        guests::AGNHOST_P2,
        &[
            "env", "WHO", "write", "/out/ok", "written", "write", "/in/no", "x",
        ],
        |o| {
            o.envs([("WHO", "me")])
                .mount(&ro, "/in", true)
                .mount(&rw, "/out", false)
        },
    )
    .run(TaskIo::new())
    .await;
    assert_ne!(exit.code, 0, "wrote into the read-only mount");
    assert_eq!(std::fs::read_to_string(rw.join("ok")).unwrap(), "written\n");
    assert!(!ro.join("no").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_past_its_memory_limit_ends_with_137_out_of_memory() {
    let within = task(guests::AGNHOST_P1, &["alloc", "4"], |o| {
        o.memory_limit(32 << 20)
    });
    assert_eq!(within.run(TaskIo::new()).await.code, 0);
    let past = task(guests::AGNHOST_P1, &["alloc", "64"], |o| {
        o.memory_limit(32 << 20)
    });
    let exit = past.run(TaskIo::new()).await;
    assert_eq!((exit.code, exit.oom), (137, true), "{exit:?}");
    assert!(exit.message.unwrap().contains("memory limit"));
}

#[tokio::test(flavor = "multi_thread")]
async fn term_is_delivered_to_a_guest_that_imports_it_else_ends_it_with_143() {
    let dir = tempfile::tempdir().unwrap();
    let aware = task(
        guests::AGNHOST_TERM_P1,
        &[
            "write",
            "/out/started",
            "y",
            "on-term",
            "7",
            "50",
            "sleep",
            "600000",
        ],
        |o| o.mount(dir.path(), "/out", false),
    );
    assert!(aware.handles_term());
    let terminator = aware.terminator();
    let run = tokio::spawn(async move { aware.run(TaskIo::new()).await });
    while !dir.path().join("started").exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    terminator.terminate();
    assert_eq!(run.await.unwrap().code, 7);

    let unaware = task(guests::AGNHOST_P2, &["loop"], |o| o);
    assert!(!unaware.handles_term());
    let terminator = unaware.terminator();
    let run = tokio::spawn(async move { unaware.run(TaskIo::new()).await });
    terminator.terminate();
    assert_eq!(run.await.unwrap().code, 143);
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_runs_a_command_or_an_export_in_a_fresh_instance_beside_the_running_guest() {
    let dir = tempfile::tempdir().unwrap();
    let probed = Arc::new(task(
        guests::PROBED_P2,
        &["print", "up", "on-term", "0", "0", "sleep", "600000"],
        |o| {
            o.mount(dir.path(), "/probe", false)
                .envs([("GREETING", "hi")])
        },
    ));
    let (io, out, _) = captured();
    let main = probed.clone();
    let run = tokio::spawn(async move { main.run(io).await });
    while out.text().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A command: the entry point with this argv, the same environment and directories.
    let (io, out, _) = captured();
    let exit = probed
        .exec(&["app.wasm".into(), "env".into(), "GREETING".into()], io)
        .await;
    assert_eq!((exit.code, out.text().as_str()), (0, "GREETING=hi\n"));
    // An export: the readiness probe fails until its file exists.
    let (io, _, err) = captured();
    let exit = probed.exec(&["readiness".into()], io).await;
    assert_eq!(exit.code, 1);
    assert!(err.text().contains("/probe/readiness"), "{}", err.text());
    std::fs::write(dir.path().join("readiness"), "").unwrap();
    assert_eq!(
        probed.exec(&["readiness".into()], TaskIo::new()).await.code,
        0
    );
    // The main instance ran on through all of it.
    assert!(!run.is_finished());
    probed.terminator().terminate();
    assert_eq!(run.await.unwrap().code, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_counts_the_tasks_cpu_and_memory_and_resize_changes_its_limits() {
    let holder = Arc::new(task(
        guests::AGNHOST_P1,
        &["alloc", "8", "print", "held", "loop"],
        |o| o.memory_limit(64 << 20),
    ));
    let (io, out, _) = captured();
    let main = holder.clone();
    let run = tokio::spawn(async move { main.run(io).await });
    while out.text().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let usage = holder.usage();
    assert!((8 << 20..10 << 20).contains(&usage.memory), "{usage:?}");
    assert!(usage.cpu >= Duration::from_millis(100), "{usage:?}");
    assert_eq!(usage.memory_limit, 64 << 20);
    // Below what it holds: refused, nothing changed.
    assert!(matches!(
        holder.resize(Some(4 << 20), None),
        Err(ResizeError::BelowUsage { .. })
    ));
    assert_eq!(holder.usage().memory_limit, 64 << 20);
    assert!(matches!(
        holder.resize(None, Some(0.0)),
        Err(ResizeError::Cpu(_))
    ));
    // A lower CPU share slows it: over the next 500 ms it runs about a fifth of the time.
    holder.resize(Some(32 << 20), Some(0.2)).unwrap();
    assert_eq!(holder.usage().memory_limit, 32 << 20);
    let before = holder.usage().cpu;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ran = holder.usage().cpu - before;
    assert!(ran < Duration::from_millis(250), "{ran:?}");
    holder.terminator().terminate();
    assert_eq!(run.await.unwrap().code, 143);
}

/// An engine's cap on what its tasks hold together (what a shim's pod cgroup leaves them): a
/// task that grows past it ends as by its own limit, and what a task frees is room again.
#[tokio::test(flavor = "multi_thread")]
async fn an_engines_memory_cap_holds_its_tasks_together() {
    let engine = TaskEngine::new(None).unwrap();
    engine.limit_memory(24 << 20);
    let bytes = std::fs::read(guests::AGNHOST_P1).unwrap();
    let make = |args: &[&str]| {
        let options = TaskOptions::new(std::iter::once("app.wasm").chain(args.iter().copied()))
            .memory_limit(64 << 20);
        Arc::new(engine.task("app.wasm".as_ref(), &bytes, options).unwrap())
    };
    let holder = make(&["alloc", "12", "print", "held", "sleep", "600000"]);
    let (io, out, _) = captured();
    let main = holder.clone();
    let held = tokio::spawn(async move { main.run(io).await });
    while out.text().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(engine.memory_used() >= 12 << 20, "{}", engine.memory_used());
    // 16 MiB fit in the task's own 64, not beside the other's 12 in the engine's 24.
    let exit = make(&["alloc", "16", "print", "unreachable"])
        .run(TaskIo::new())
        .await;
    assert!((exit.code, exit.oom) == (137, true), "{exit:?}");
    holder.terminator().terminate();
    assert_eq!(held.await.unwrap().code, 143);
    let exit = make(&["alloc", "16"]).run(TaskIo::new()).await;
    assert_eq!((exit.code, exit.oom), (0, false), "{exit:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_of_the_same_guest_share_its_compiled_code() {
    let engine = TaskEngine::new(None).unwrap();
    let bytes = std::fs::read(guests::AGNHOST_P2).unwrap();
    let start = std::time::Instant::now();
    let first = engine.task("a.wasm".as_ref(), &bytes, TaskOptions::new(["a.wasm"]));
    let compiled = start.elapsed();
    let start = std::time::Instant::now();
    let second = engine.task("b.wasm".as_ref(), &bytes, TaskOptions::new(["b.wasm"]));
    let shared = start.elapsed();
    assert!(first.is_ok() && second.is_ok());
    // The second is made from the first's compiled image: a small part of a compile.
    assert!(
        shared * 10 < compiled,
        "compiled {compiled:?}, second {shared:?}"
    );
    let refused = engine.task("x".as_ref(), b"not wasm", TaskOptions::new(["x"]));
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("not a WebAssembly")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_components_sockets_are_the_hosts() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // An echo server on the host: the guest's `ping` connects twice, once to wait for it and
    // once to send a byte and read it back.
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut got = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).unwrap();
            s.write_all(&buf).unwrap();
            got.extend(buf);
        }
        got
    });
    let exit = task(guests::AGNHOST_P2, &["ping", &addr, "1"], |o| o)
        .run(TaskIo::new())
        .await;
    assert_eq!(exit.code, 0, "{exit:?}");
    assert_eq!(server.join().unwrap(), b"x");
}

/// A task whose component is an HTTP handler serves it on the host's network at its port (the
/// shim's container, in its pod's namespace), a fresh instance per request; TERM closes the port,
/// lets the request under way finish, and the task exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn an_http_handler_task_serves_on_its_port_and_drains_at_term() {
    let port = wasmpod_tests::free_port();
    let handler = task(guests::HTTP_HANDLER_P2, &[], |o| {
        o.http_port(port).envs([("QUIET", "1")])
    });
    let terminator = handler.terminator();
    let run = tokio::spawn(async move { handler.run(TaskIo::new()).await });
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..3 {
        let reply = crate::http::get(addr, "/").await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "hello 1\n"));
    }
    // A request whose response has begun when TERM comes still ends whole.
    let slow = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET /headers-then-sleep/300 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut raw = Vec::new();
        let mut buf = [0; 1024];
        while !String::from_utf8_lossy(&raw).contains("first") {
            let n = s.read(&mut buf).unwrap();
            assert_ne!(n, 0, "the connection ended early");
            raw.extend_from_slice(&buf[..n]);
        }
        terminator.terminate();
        while !String::from_utf8_lossy(&raw).contains("second") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&raw).into_owned()
    });
    let response = slow.await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("second"), "cut at TERM: {response}");
    let exit = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.code, 0, "{exit:?}");
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after the task ended"
    );
}
