//! A `wasi:http/proxy` component: an HTTP handler, instantiated per request. What it does is in
//! the path:
//! `/` says hello with a count of requests this instance handled (always 1: no state is shared
//! between requests), `/env/NAME` answers NAME's value, `/sleep/MS` answers after MS
//! milliseconds, `/headers-then-sleep/MS` sends its headers and a first line, then sleeps MS
//! before finishing the body, `/trap` traps, `/spin` never ends, `/alloc/MIB` allocates and
//! touches MIB MiB, `/read/PATH` answers a file's contents, `/fetch/HOST:PORT/PATH` sends a GET
//! to `http://HOST:PORT/PATH` and answers its status and body, `/no-response` returns without
//! setting one. Anything else is 404. It prints `handling PATH` when a request starts and
//! `handled PATH` when it ends, unless `QUIET` is set (the benchmark).

use std::io::{Read as _, Write as _};
use std::sync::atomic::{AtomicU32, Ordering};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingRequest, OutgoingResponse,
    ResponseOutparam, Scheme,
};

wasip2::http::proxy::export!(Handler);

static HANDLED: AtomicU32 = AtomicU32::new(0);

struct Handler;

fn respond(out: ResponseOutparam, status: u16, body: &[u8]) {
    let response = OutgoingResponse::new(Fields::new());
    response.set_status_code(status).unwrap();
    let outgoing = response.body().unwrap();
    ResponseOutparam::set(out, Ok(response));
    let stream = outgoing.write().unwrap();
    // `blocking_write_and_flush` takes at most 4096 bytes a call.
    for chunk in body.chunks(4096) {
        stream.blocking_write_and_flush(chunk).unwrap();
    }
    drop(stream);
    OutgoingBody::finish(outgoing, None).unwrap();
}

fn sleep_ms(ms: u64) {
    wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

fn fetch(target: &str) -> Result<(u16, Vec<u8>), String> {
    let (authority, path) = match target.find('/') {
        Some(i) => (&target[..i], &target[i..]),
        None => (target, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    request.set_method(&Method::Get).unwrap();
    request.set_scheme(Some(&Scheme::Http)).unwrap();
    request.set_authority(Some(authority)).unwrap();
    request.set_path_with_query(Some(path)).unwrap();
    let body = request.body().unwrap();
    OutgoingBody::finish(body, None).unwrap();
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let incoming = response.consume().map_err(|()| "no body")?;
    let mut bytes = Vec::new();
    incoming
        .stream()
        .map_err(|()| "no stream")?
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{e}"))?;
    Ok((status, bytes))
}

impl wasip2::exports::http::incoming_handler::Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let handled = HANDLED.fetch_add(1, Ordering::SeqCst) + 1;
        let path = request.path_with_query().unwrap_or_default();
        let quiet = std::env::var_os("QUIET").is_some();
        if !quiet {
            println!("handling {path}");
        }
        let mut parts = path.trim_start_matches('/').splitn(2, '/');
        let (word, rest) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        match word {
            "" => respond(out, 200, format!("hello {handled}\n").as_bytes()),
            "env" => {
                let value = std::env::var(rest).unwrap_or_default();
                respond(out, 200, format!("{value}\n").as_bytes())
            }
            "sleep" => {
                sleep_ms(rest.parse().unwrap());
                respond(out, 200, b"slept\n")
            }
            "headers-then-sleep" => {
                let response = OutgoingResponse::new(Fields::new());
                let outgoing = response.body().unwrap();
                ResponseOutparam::set(out, Ok(response));
                let mut stream = outgoing.write().unwrap();
                stream.write_all(b"first\n").unwrap();
                stream.flush().unwrap();
                sleep_ms(rest.parse().unwrap());
                stream.write_all(b"second\n").unwrap();
                drop(stream);
                OutgoingBody::finish(outgoing, None).unwrap();
            }
            "trap" => panic!("trap requested"),
            "spin" => loop {
                std::hint::black_box(handled);
            },
            "alloc" => {
                let mib: usize = rest.parse().unwrap();
                let mut v = vec![0u8; mib << 20];
                for i in (0..v.len()).step_by(4096) {
                    v[i] = 1;
                }
                respond(
                    out,
                    200,
                    format!("allocated {}\n", v.len() >> 20).as_bytes(),
                )
            }
            // `hold/MIB/MS`: holds MIB MiB for MS milliseconds, then answers.
            "hold" => {
                let (mib, ms) = rest.split_once('/').unwrap();
                let mut v = vec![0u8; mib.parse::<usize>().unwrap() << 20];
                for i in (0..v.len()).step_by(4096) {
                    v[i] = 1;
                }
                sleep_ms(ms.parse().unwrap());
                respond(out, 200, format!("held {}\n", v.len() >> 20).as_bytes())
            }
            "read" => match std::fs::read(format!("/{rest}")) {
                Ok(bytes) => respond(out, 200, &bytes),
                Err(e) => respond(out, 404, format!("{e}\n").as_bytes()),
            },
            "fetch" => match fetch(rest) {
                Ok((status, body)) => {
                    let mut text = format!("upstream {status}: ").into_bytes();
                    text.extend_from_slice(&body);
                    respond(out, 200, &text)
                }
                Err(e) => respond(out, 502, format!("fetch failed: {e}\n").as_bytes()),
            },
            "no-response" => drop(out),
            _ => respond(out, 404, b"not found\n"),
        }
        if !quiet {
            let _ = std::io::stdout().write_all(format!("handled {path}\n").as_bytes());
        }
    }
}

fn main() {}
