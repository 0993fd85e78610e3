//! `wasmpod::task`: one container run as a process of its own (what the containerd shim runs),
//! through the library: exit codes, TERM, the memory limit, mounts, precompiled artefacts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use wasmpod::task::{Task, TaskOptions, precompile};
use wasmpod_tests::guests;

fn task(wasm: &str, args: &[&str], options: impl FnOnce(TaskOptions) -> TaskOptions) -> Task {
    let argv = std::iter::once("app.wasm").chain(args.iter().copied());
    let bytes = std::fs::read(wasm).unwrap();
    Task::new("app.wasm".as_ref(), &bytes, options(TaskOptions::new(argv))).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_and_traps() {
    for wasm in [guests::AGNHOST_P1, guests::AGNHOST_P2] {
        let exit = task(wasm, &["exit", "3"], |o| o).run().await;
        assert_eq!(
            (exit.code, exit.oom),
            (if wasm == guests::AGNHOST_P1 { 3 } else { 1 }, false)
        );
        let exit = task(wasm, &["trap"], |o| o).run().await;
        assert_eq!(exit.code, 134);
        assert!(exit.message.unwrap().contains("unreachable"));
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
    .run()
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
    assert_eq!(within.run().await.code, 0);
    let past = task(guests::AGNHOST_P1, &["alloc", "64"], |o| {
        o.memory_limit(32 << 20)
    });
    let exit = past.run().await;
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
    let run = tokio::spawn(aware.run());
    while !dir.path().join("started").exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    terminator.terminate();
    assert_eq!(run.await.unwrap().code, 7);

    let unaware = task(guests::AGNHOST_P2, &["loop"], |o| o);
    assert!(!unaware.handles_term());
    let terminator = unaware.terminator();
    let run = tokio::spawn(unaware.run());
    terminator.terminate();
    assert_eq!(run.await.unwrap().code, 143);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_precompiled_artefact_runs_and_anything_else_is_refused() {
    let wasm = std::fs::read(guests::AGNHOST_P2).unwrap();
    let artefact = precompile("app.wasm".as_ref(), &wasm).unwrap();
    let options = TaskOptions::new(["app.wasm", "exit", "0"]);
    // SAFETY: the artefact is `precompile`'s.
    let task = unsafe { Task::from_precompiled("app.wasm".as_ref(), &artefact, options.clone()) };
    assert_eq!(task.unwrap().run().await.code, 0);
    // SAFETY: wasm that is not an artefact is recognised as such and refused.
    let refused = unsafe { Task::from_precompiled("app.wasm".as_ref(), &wasm, options) };
    assert!(refused.is_err());
    assert!(precompile("x".as_ref(), b"not wasm").is_err());
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
        .run()
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
    let run = tokio::spawn(handler.run());
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
